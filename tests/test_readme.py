"""What the README and the docs/ pages show runs as shown: every console example (a ggaudit command on
the bundled fixtures) gives its output and exit status; the library example, as written, on a model with a
4224-row table; the shell completion lines. And every relative link of those pages leads somewhere.

A console example is a ```console block: ``$ ggaudit ...`` runs the command from the checkout, the lines
up to the next ``$`` are its output (stdout and stderr as a terminal shows them; a line ``...`` stands for
any lines, none included), and ``$ echo $?`` is followed by the exit status of the command before it."""

from __future__ import annotations

import importlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType as T

import ggaudit
from ggaudit.format.build import TensorSpec, write_gguf

from support import REPO, run_cli, tensor_payload

README = REPO / "README.md"
DOCS = REPO / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]
LIBRARY, COMPLETION = DOCS / "library.md", DOCS / "completion.md"
EXAMPLE_MARK = "<!-- tests/test_readme.py runs this example as written -->"
ROWS, ROW_BYTES = 4224, 68           # token_embd.weight: Q8_0, 64 columns (two 34-byte blocks a row)
INF_ROW = 4166                       # one of the rows the example checks
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def _name(page: Path) -> str:
    return page.relative_to(REPO).as_posix()


def _blocks_of(text: str) -> list[tuple[str, str]]:
    """Each fenced block of a text: its language and its text."""
    return FENCE.findall(text)


def _blocks(page: Path) -> list[tuple[str, str]]:
    return _blocks_of(page.read_text(encoding="utf-8"))


def _library_example() -> str:
    """The code block right after the mark, which is on the library page."""
    text = LIBRARY.read_text(encoding="utf-8")
    assert text.count(EXAMPLE_MARK) == 1
    return text.split(EXAMPLE_MARK + "\n```python\n", 1)[1].split("\n```\n", 1)[0]


def _write_model(path: Path, *, inf_row: int | None) -> None:
    """A model whose token table has rows 4162..4170 (the example's); with ``inf_row``, that row's first
    scale is +Inf."""
    table = bytearray(tensor_payload(T.Q8_0, (64, ROWS), seed=12))
    if inf_row is not None:
        table[inf_row * ROW_BYTES:inf_row * ROW_BYTES + 2] = (0x7C00).to_bytes(2, "little")
    norm = tensor_payload(T.F32, (64,), seed=13)
    write_gguf(path, [TensorSpec("token_embd.weight", T.Q8_0, (64, ROWS), bytes(table)),
                      TensorSpec("output_norm.weight", T.F32, (64,), norm)], {"general.architecture": "llama"})


def test_the_library_example_is_the_engine_developers_ten_lines() -> None:
    code = _library_example()
    lines = code.splitlines()
    assert len(lines) == 10 and lines[:3] == ["import json", "import ggaudit", ""]
    assert "rows=list(range(4162, 4171))" in code and code.count(".ok") == 3 and ".to_json()" in code
    assert re.findall(r"ggaudit\.(\w+)\(", code) == [
        "open_model", "scan", "check_rows", "write_manifest", "build_manifest", "verify"]


@pytest.mark.parametrize(("inf_row", "printed"), [(None, "True True True"), (INF_ROW, "False False True")],
                         ids=["clean", "inf-in-a-checked-row"])
def test_the_library_example_runs_as_written(inf_row: int | None, printed: str, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    _write_model(tmp_path / "model.gguf", inf_row=inf_row)
    monkeypatch.chdir(tmp_path)           # the example names model.gguf and writes model.manifest.json
    exec(compile(_library_example(), str(LIBRARY), "exec"), {"__name__": "readme_example"})
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and out[0] == printed
    docs = json.loads(out[1])
    assert [d["ok"] for d in docs] == [word == "True" for word in printed.split()]
    assert [d["tool_version"] for d in docs] == [ggaudit.__version__] * 3
    assert [d["schema"] for d in docs] == ["ggaudit/scan-report/1", "ggaudit/rows-report/1", "ggaudit/verify-report/1"]
    assert (tmp_path / "model.manifest.json").is_file()
    if inf_row is not None:
        found = [(f["kind"], f["row"], f["field"]) for t in docs[0]["tensors"] for f in t["findings"]]
        assert found == [("+inf", INF_ROW, "d")]


#: A python block after this mark runs from the checkout (on the bundled fixtures), and prints exactly the
#: text block that follows it.
FIXTURE_EXAMPLE_MARK = "<!-- tests/test_readme.py runs this example on the fixtures and compares what it prints -->"
FIXTURE_EXAMPLE = re.compile(re.escape(FIXTURE_EXAMPLE_MARK) + r"\n```python\n(.*?)^```\n\n```text\n(.*?)^```$",
                             re.DOTALL | re.MULTILINE)


def _fixture_examples() -> list[tuple[str, int, str, str]]:
    """(page, index, code, what it prints) of every marked example; a mark not followed by both blocks fails."""
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        examples = FIXTURE_EXAMPLE.findall(text)
        assert len(examples) == text.count(FIXTURE_EXAMPLE_MARK), f"{_name(page)}: a mark without its two blocks"
        found += [(_name(page), i, code, printed) for i, (code, printed) in enumerate(examples)]
    return found


FIXTURE_EXAMPLES = _fixture_examples()


def test_the_library_page_shows_diagnostics_and_the_rows_page_an_engines_reader_on_the_fixtures() -> None:
    assert [(page, ".diagnostics()" in code, "reader_factory=" in code) for page, _, code, _ in FIXTURE_EXAMPLES] \
        == [("docs/library.md", True, False), ("docs/rows.md", False, True)]


@pytest.mark.parametrize(("page", "index", "code", "printed"), FIXTURE_EXAMPLES,
                         ids=[f"{p}#{i}" for p, i, _, _ in FIXTURE_EXAMPLES])
def test_each_fixture_example_prints_what_is_shown(page: str, index: int, code: str, printed: str,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(REPO)
    exec(compile(code, f"{page} example {index}", "exec"), {"__name__": "docs_example"})
    assert capsys.readouterr().out == printed


#: ``from ggaudit.X import a, b`` as the pages write it (in backquotes or a code block).
DOCUMENTED_IMPORT = re.compile(r"from (ggaudit(?:\.\w+)*) import (\w+(?:, \w+)*)")


def _defined_in(module: str, name: str) -> bool:
    """Whether ``module`` has ``name`` and, for a class or function, defines it (not merely imports it); the
    front door's names (``ggaudit.__all__``) are its own, re-exported on purpose."""
    found = getattr(importlib.import_module(module), name, None)
    front_door = module == "ggaudit" and name in ggaudit.__all__
    return found is not None and (front_door or getattr(found, "__module__", module) == module)


def test_every_import_the_pages_show_imports_from_where_it_is_defined() -> None:
    """A thing that moved leaves no alias behind (a module imports it, or re-exports it): the pages must name
    the module that defines it."""
    stale = [f"{_name(page)}: from {module} import {name}" for page in PAGES
             for module, names in DOCUMENTED_IMPORT.findall(page.read_text(encoding="utf-8"))
             for name in names.split(", ") if not _defined_in(module, name)]
    assert stale == []
    assert not _defined_in("ggaudit.verify.digests", "read_through")       # imported there, for hash_file
    assert _defined_in("ggaudit", "Reader") and not _defined_in("ggaudit.rows.options", "Reader")  # front door only
    assert "from ggaudit.io.fan_out import read_through" in LIBRARY.read_text(encoding="utf-8")


def _complete(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The ggaudit entry point (as the console script runs it) under click's completion variables."""
    return subprocess.run([sys.executable, "-m", "ggaudit"], env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=60, cwd=REPO)


#: What each shell's script registers: completion of the ggaudit command by click's function.
REGISTERS = {"bash": "complete -o nosort -F _ggaudit_completion ggaudit",
             "zsh": "compdef _ggaudit_completion ggaudit",
             "fish": "complete --no-files --command ggaudit --arguments"}


def test_the_docs_give_a_completion_line_for_bash_zsh_and_fish() -> None:
    lines = re.findall(r"_GGAUDIT_COMPLETE=(\w+)_source ggaudit", COMPLETION.read_text(encoding="utf-8"))
    assert lines == list(REGISTERS)


@pytest.mark.parametrize("shell", list(REGISTERS))
def test_each_completion_line_loads_a_script(shell: str) -> None:
    if shell == "bash" and shutil.which("bash") is None:
        pytest.skip("click asks bash for its version before it writes the bash script")
    result = _complete({"_GGAUDIT_COMPLETE": f"{shell}_source"})
    assert (result.returncode, result.stderr) == (0, "")
    assert REGISTERS[shell] in result.stdout and f"_GGAUDIT_COMPLETE={shell}_complete" in result.stdout


def test_completion_completes_commands_and_options() -> None:
    def bash(words: str) -> str:
        result = _complete({"_GGAUDIT_COMPLETE": "bash_complete", "COMP_WORDS": words,
                            "COMP_CWORD": str(len(words.split()) - 1)})
        assert (result.returncode, result.stderr) == (0, "")
        return result.stdout

    assert bash("ggaudit sc") == "plain,scan\n"
    assert bash("ggaudit ve") == "plain,verify\n"
    assert bash("ggaudit scan --sha") == "plain,--sha256\n"


# --- console examples --------------------------------------------------------------------------------

def _console_examples() -> list[tuple[str, int, str]]:
    """(page, index among the page's console blocks, text) for every console block of every page."""
    found = []
    for page in PAGES:
        blocks = [text for lang, text in _blocks(page) if lang == "console"]
        found += [(_name(page), i, text) for i, text in enumerate(blocks)]
    return found


def _steps(text: str) -> list[tuple[str, list[str]]]:
    """A console block as its commands, each with the lines shown after it."""
    steps: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            assert steps, f"output before any command: {line!r}"
            steps[-1][1].append(line)
    return steps


def _matches(shown: list[str], actual: list[str]) -> bool:
    """Whether the lines shown are the actual lines, a shown ``...`` standing for any run of them."""
    if not shown:
        return not actual
    if shown[0] == "...":
        return any(_matches(shown[1:], actual[i:]) for i in range(len(actual) + 1))
    return bool(actual) and shown[0] == actual[0] and _matches(shown[1:], actual[1:])


def _as_shown(output: str) -> list[str]:
    """The lines of a command's output as the pages show them: the pages show Linux and macOS, where a path
    ggaudit builds (a split set's next shard, a file it checks) is written with '/'; Windows writes '\\'
    (docs/platforms.md)."""
    lines = output.splitlines()
    return [line.replace("fixtures\\", "fixtures/") for line in lines] if os.sep == "\\" else lines


EXAMPLES = _console_examples()


def test_the_pages_hold_console_examples() -> None:
    """The README's quick start and at least one example of each command page that has a fixture to show."""
    pages = {page for page, _, _ in EXAMPLES}
    assert {"README.md", "docs/scan.md", "docs/verify.md", "docs/diff.md", "docs/info.md"} <= pages


@pytest.mark.parametrize(("page", "index", "text"), EXAMPLES, ids=[f"{p}#{i}" for p, i, _ in EXAMPLES])
def test_each_console_example_gives_the_output_and_exit_status_shown(
        page: str, index: int, text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)                  # the examples name fixtures/ as typed from the checkout
    last_status: int | None = None
    for command, shown in _steps(text):
        if command == "echo $?":
            assert last_status is not None and shown == [str(last_status)], (command, shown, last_status)
            continue
        words = shlex.split(command)
        assert words[0] == "ggaudit", f"{page}: only ggaudit commands run in a console example: {command}"
        result = run_cli(words[1:])
        assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
        assert _matches(shown, _as_shown(result.output)), f"{page}: {command}\n{result.output}"
        last_status = result.exit_code


def test_every_fenced_ggaudit_command_on_the_fixtures_is_a_console_example() -> None:
    """A command on the bundled fixtures shown any other way would not be run, and could go stale."""
    unrun = [(_name(page), text) for page in PAGES for lang, text in _blocks(page) if lang != "console"
             and "fixtures/" in text and re.search(r"^(\$ )?ggaudit ", text, re.MULTILINE)]
    assert unrun == []


def test_the_example_matcher_takes_dots_for_any_lines() -> None:
    assert _matches(["a", "...", "d"], ["a", "b", "c", "d"]) and _matches(["a", "...", "b"], ["a", "b"])
    assert not _matches(["a", "...", "d"], ["a", "b", "c"]) and not _matches(["a"], ["a", "b"])


# --- links ---------------------------------------------------------------------------------------------

LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as hyphens,
    a repeated heading numbered from -1."""
    prose = FENCE.sub("", page.read_text(encoding="utf-8"))
    anchors: set[str] = set()
    for heading in re.findall(r"^#+ (.+)$", prose, re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchor, n = slug, 0
        while anchor in anchors:
            n += 1
            anchor = f"{slug}-{n}"
        anchors.add(anchor)
    return anchors


def _relative_links(page: Path) -> list[str]:
    prose = FENCE.sub("", page.read_text(encoding="utf-8"))
    return [target for target in LINK.findall(prose) if not re.match(r"[a-z]+:", target)]


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_relative_link_leads_to_a_file_and_heading(page: Path) -> None:
    broken = []
    for target in _relative_links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.is_file() or (anchor and anchor not in _anchors(file)):
            broken.append(target)
    assert broken == []


def test_the_readme_links_every_docs_page_and_is_a_front_page() -> None:
    linked = {(README.parent / target.partition("#")[0]).resolve() for target in _relative_links(README)}
    assert set(DOCS.glob("*.md")) - linked == set()
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 300


def test_the_link_checker_sees_a_missing_heading(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Page\n\n## Exit status\n\n## Exit status\n", encoding="utf-8")
    assert _anchors(tmp_path / "a.md") == {"page", "exit-status", "exit-status-1"}


def test_the_readmes_test_command_is_the_one_ci_runs() -> None:
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Run the tests\n", 1)[1].split("\n## ", 1)[0]
    command = "pip install -e '.[test,dask]' && python -m pytest"
    assert _blocks_of(section)[0] == ("", command + "\n")
    assert command in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()


#: README.md's install for Linux and macOS: a virtual environment first, since Debian's and Ubuntu's own python3
#: refuse ``pip install`` outside one (PEP 668). scripts/packaging_lane.sh runs these lines as written.
VENV_INSTALL = "python3 -m venv .venv\n. .venv/bin/activate\npython3 -m pip install .\nggaudit --version\n"


def test_the_linux_install_is_in_a_venv_on_both_pages_and_the_packaging_lane_runs_the_readmes_as_written() -> None:
    readme = README.read_text(encoding="utf-8").split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    linux = [text for _, text in _blocks_of(readme) if text.startswith("python3 -m venv ")]
    assert linux == [VENV_INSTALL]
    # No line of either page installs into the system's python3 outside that block.
    page = (DOCS / "install.md").read_text(encoding="utf-8")
    section = page.split("\n## Linux, macOS\n", 1)[1].split("\n## ", 1)[0]
    assert _blocks_of(section)[0] == ("", VENV_INSTALL)
    others = [text for text in (*(t for _, t in _blocks_of(readme)), *(t for _, t in _blocks_of(page)))
              if text != VENV_INSTALL]
    assert not any(line.startswith("python3 -m pip install") for text in others for line in text.splitlines())
    assert "externally-managed-environment" in readme and "PEP 668" in section
    lane = (REPO / "scripts" / "packaging_lane.sh").read_text(encoding="utf-8")
    assert 'if b.startswith("python3 -m venv ")]' in lane and 'bash -e -c "$readme_install"' in lane
    assert "externally-managed-environment" in lane
    assert "scripts/packaging_lane.sh" in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
