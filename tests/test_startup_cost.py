"""Starting the command line costs click and ggaudit's own small modules: no numpy, no gguf, no job that
does not run (issue 15); a scan loads the scan, not the other jobs (issue 24; scripts/bench_startup.py
times both). The format facts ggaudit keeps so that it need not import gguf equal gguf's."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import click
import gguf
import pytest
from click.testing import CliRunner

from ggaudit.cli import COMMANDS, main
from ggaudit.format.blocks import GGML_QUANT_SIZES, LAYOUTS, GGMLQuantizationType, GGUFValueType
from ggaudit.format.build import TensorSpec, write_gguf
from stores_support import STORE_MODULES

#: What `--help` must not load: the libraries and the modules of the jobs.
#: No module of the scan either (issue 37: `scan --help` imported its report for one constant), nor the
#: installed metadata (read only to explain a failed import).
HEAVY = ("numpy", "gguf", "yaml", "jinja2", "ggaudit.scan.", "ggaudit.rows.", "ggaudit.verify.walk",
         "ggaudit.cli.reporters.text", "importlib.metadata")
#: What `ggaudit scan MODEL` must not load: the other jobs (rows; verify, with diff; check) and the fleet.
NOT_SCAN = ("ggaudit.rows", "ggaudit.verify", "ggaudit.check", "ggaudit.fleet", "distributed")
#: What a scan of a small model (read in-process) on a plain path without --anomalies must not load either:
#: the reader processes, the scale model, and the stores (the registry imports a store for a name of it).
#: jinja2 too: the model scanned has no chat template.
NOT_SMALL_SCAN = ("multiprocessing", "ggaudit.scan.workers", "ggaudit.scan.anomalies", "ggaudit.scan.scales", "jinja2",
                  *STORE_MODULES.values())


#: Runs ``python -m ggaudit ARGS`` as -m does, then prints every loaded module on stderr. (-X importtime
#: would not do: it does not report a module imported with importlib, as the group imports commands.)
_WRAPPER = """
import json, runpy, sys
sys.argv = ["ggaudit", *json.loads(sys.argv[1])]
try:
    runpy.run_module("ggaudit", run_name="__main__", alter_sys=True)
except SystemExit as end:
    assert end.code in (0, None), end.code
sys.stderr.write(json.dumps(sorted(sys.modules)))
"""


def _run(*args: str) -> tuple[str, list[str]]:
    """What `python -m ggaudit ARGS` printed, and the modules it has loaded when it ends (it must exit 0)."""
    done = subprocess.run([sys.executable, "-c", _WRAPPER, json.dumps(args)], capture_output=True, text=True,
                          check=True)
    modules: list[str] = json.loads(done.stderr)
    return done.stdout, modules


def _imported(*args: str) -> list[str]:
    """The modules `python -m ggaudit ARGS` (a help) has loaded when it ends."""
    stdout, modules = _run(*args)
    assert stdout.startswith("Usage: ggaudit")
    return modules


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize("args", [["--help"], *([name, "--help"] for name in sorted(COMMANDS))], ids=" ".join)
def test_help_imports_neither_numpy_nor_gguf_nor_a_job(args: list[str]) -> None:
    modules = _imported(*args)
    assert "ggaudit.cli" in modules and "click" in modules      # the report is read right
    assert [m for m in modules if m.startswith(HEAVY)] == []


def test_group_help_imports_no_command_and_scan_help_only_scan() -> None:
    commands = [f"ggaudit.cli.{name}" for name in COMMANDS]
    assert [m for m in _imported("--help") if m in commands] == []
    assert [m for m in _imported("scan", "--help") if m in commands] == ["ggaudit.cli.scan"]


#: How each format says a scan of a clean model is clean.
_CLEAN = {"text": lambda out: "result: clean" in out, "json": lambda out: json.loads(out)["status"] == "clean",
          "sarif": lambda out: [run["results"] for run in json.loads(out)["runs"]] == [[]],
          "junit": lambda out: 'failures="0" errors="0"' in out and "<testcase " in out,
          "html": lambda out: "<html" in out and ">clean<" in out}


@pytest.mark.parametrize("fmt", sorted(_CLEAN))
def test_scan_loads_no_other_job_nor_the_fleet(tmp_path: Path, fmt: str) -> None:
    """The scan's report names its types; each reporter finds its lines (or sections) by the type's name,
    so showing a scan does not import the rows, verify and diff jobs that make the other reports."""
    model = tmp_path / "model.gguf"
    values = struct.pack("<16f", *range(16))
    write_gguf(model, [TensorSpec("a", GGMLQuantizationType.F32, (8, 2), values),
                       TensorSpec("b", GGMLQuantizationType.Q4_K, (256, 1), bytes(144))])
    stdout, modules = _run("scan", "--format", fmt, str(model))
    assert "ggaudit.scan.run" in modules and f"ggaudit.cli.reporters.{fmt}" in modules     # it ran, and showed
    assert _CLEAN[fmt](stdout), stdout
    assert [m for m in modules if _within(m, NOT_SCAN)] == []
    assert [m for m in modules if _within(m, NOT_SMALL_SCAN)] == []


def test_help_lists_every_command_with_its_summary() -> None:
    out = CliRunner().invoke(main, ["--help"], terminal_width=1000, max_content_width=1000).output
    listed = out.split("Commands:\n", 1)[1].splitlines()
    width = max(len(name) for name in COMMANDS) + 2
    assert listed == [f"  {name.ljust(width)}{COMMANDS[name][1]}" for name in sorted(COMMANDS)]


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_summary_is_its_commands_own_and_its_help_works(name: str) -> None:
    command = main.get_command(click.Context(main), name)
    assert command is not None and command.name == name
    assert command.get_short_help_str(limit=10_000) == COMMANDS[name][1]
    result = CliRunner().invoke(main, [name, "--help"], prog_name="ggaudit")
    assert result.exit_code == 0 and result.output.startswith(f"Usage: ggaudit {name} [OPTIONS]")


def test_an_unknown_command_is_a_usage_error() -> None:
    assert main.get_command(click.Context(main), "scna") is None
    result = CliRunner().invoke(main, ["scna"])
    assert result.exit_code == 2 and "No such command 'scna'" in result.output


def test_ggml_types_and_block_sizes_equal_ggufs() -> None:
    ours = {t.name: t.value for t in GGMLQuantizationType}
    theirs = {t.name: t.value for t in gguf.GGMLQuantizationType}
    assert ours == {name: value for name, value in theirs.items() if name in ours}
    assert set(LAYOUTS) <= set(GGMLQuantizationType) and set(GGML_QUANT_SIZES) == set(GGMLQuantizationType)
    assert {t.name: size for t, size in GGML_QUANT_SIZES.items()} == {
        t.name: size for t, size in gguf.GGML_QUANT_SIZES.items() if t.name in ours}
    # Every type gguf knows and ggaudit has block facts for: the same id and the same block.
    for t in gguf.GGMLQuantizationType:
        if t.name in ours and GGMLQuantizationType[t.name] in LAYOUTS:
            layout = LAYOUTS[GGMLQuantizationType[t.name]]
            assert (layout.block_size, layout.block_bytes) == gguf.GGML_QUANT_SIZES[t], t.name


def test_gguf_value_types_equal_ggufs() -> None:
    assert {t.name: t.value for t in GGUFValueType} == {t.name: t.value for t in gguf.GGUFValueType}


def test_each_reporter_is_named_as_its_module() -> None:
    """`--format` offers the reporters' module names without importing them: each must be its NAME."""
    import importlib

    from ggaudit.cli.reporters import NAMES

    assert NAMES == ("html", "json", "junit", "sarif", "text")
    assert [importlib.import_module(f"ggaudit.cli.reporters.{name}").NAME for name in NAMES] == list(NAMES)


def test_completing_a_command_name_imports_no_command() -> None:
    """What bash asks for `ggaudit s<TAB>`: the names from the table, with their summaries."""
    env = {**os.environ, "_GGAUDIT_COMPLETE": "bash_complete", "COMP_WORDS": "ggaudit s", "COMP_CWORD": "1"}
    code = ("import sys\nfrom ggaudit.cli import main\ntry:\n    main(prog_name='ggaudit')\nexcept SystemExit:\n"
            "    pass\nsys.stderr.write(repr(sorted(m for m in sys.modules if m.startswith('ggaudit.cli.'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert done.stdout.splitlines() == ["plain,scan"]
    assert done.stderr == "['ggaudit.cli.common']"
