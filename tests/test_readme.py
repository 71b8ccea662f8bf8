"""What the README shows runs as shown: the library example, as written, on a model with a 4224-row
table; and the shell completion lines it gives."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType as T

import ggaudit
from ggaudit.format.build import TensorSpec, write_gguf

from reliability_support import REPO, tensor_payload

README = REPO / "README.md"
EXAMPLE_MARK = "<!-- tests/test_readme.py runs this example as written -->"
ROWS, ROW_BYTES = 4224, 68           # token_embd.weight: Q8_0, 64 columns (two 34-byte blocks a row)
INF_ROW = 4166                       # one of the rows the example checks


def _section(heading: str) -> str:
    text = README.read_text(encoding="utf-8")
    assert text.count(f"\n## {heading}\n") == 1, heading
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def _library_example() -> str:
    """The code block right after the mark, which is in the Library section."""
    section = _section("Library")
    assert section.count(EXAMPLE_MARK) == 1
    return section.split(EXAMPLE_MARK + "\n```python\n", 1)[1].split("\n```\n", 1)[0]


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
    exec(compile(_library_example(), str(README), "exec"), {"__name__": "readme_example"})
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


def _complete(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The ggaudit entry point (as the console script runs it) under click's completion variables."""
    return subprocess.run([sys.executable, "-m", "ggaudit"], env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=60, cwd=REPO)


#: What each shell's script registers: completion of the ggaudit command by click's function.
REGISTERS = {"bash": "complete -o nosort -F _ggaudit_completion ggaudit",
             "zsh": "compdef _ggaudit_completion ggaudit",
             "fish": "complete --no-files --command ggaudit --arguments"}


def test_the_readme_gives_a_completion_line_for_bash_zsh_and_fish() -> None:
    lines = re.findall(r"_GGAUDIT_COMPLETE=(\w+)_source ggaudit", _section("Shell completion"))
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
