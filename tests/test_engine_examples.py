"""docs/engine-tests.md against what it describes: its two examples are the files of examples/engine_tests/
as they are, the example suite passes under pytest (its own tests plant each fault and see it caught), the page
names every name the front door exports (and no type it does not), each job it names lists what it raises, each
misuse in misuse.py is one statement marked with the one error code mypy gives it, and CI runs the lane that
type-checks them against an editable install (scripts/typing_lane.sh: too slow for the suite, it makes a venv
and installs ggaudit in it)."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import ggaudit

from support import REPO

PAGE = REPO / "docs" / "engine-tests.md"
EXAMPLES = REPO / "examples" / "engine_tests"
LANE = REPO / "scripts" / "typing_lane.sh"
MARK = "<!-- tests/test_engine_examples.py: this block is examples/engine_tests/{} -->\n```python\n"
IGNORE = re.compile(r"  # type: ignore\[([a-z-]+)\]$")


def _block(name: str) -> str:
    """The page's code block after the mark that names *name*."""
    text = PAGE.read_text(encoding="utf-8")
    mark = MARK.format(name)
    assert text.count(mark) == 1, f"docs/engine-tests.md: no one mark for {name}"
    return text.split(mark, 1)[1].split("```\n", 1)[0]


def test_the_pages_examples_are_the_example_files_as_they_are() -> None:
    for name in ("test_engine.py", "misuse.py"):
        assert _block(name) == (EXAMPLES / name).read_text(encoding="utf-8"), name


def _tests_in(path: Path) -> list[str]:
    return [node.name for node in ast.parse(path.read_text(encoding="utf-8")).body
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")]


def test_the_example_suite_passes_each_check_and_sees_each_planted_fault(tmp_path: Path) -> None:
    names = _tests_in(EXAMPLES / "test_engine.py")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", "--basetemp",
                           str(tmp_path / "base"), str(EXAMPLES)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    passed = re.findall(r"^\S*test_engine\.py::(\w+) PASSED", done.stdout, re.MULTILINE)
    assert passed == names and f"{len(names)} passed in " in done.stdout.splitlines()[-1]
    planted = {"test_a_nan_in_the_model_is_found_at_its_row_and_column",
               "test_a_reader_one_row_off_delivers_the_next_rows_bytes",
               "test_the_file_is_the_one_its_manifest_was_made_of",
               "test_a_truncated_download_is_a_format_error_naming_the_tensor_cut_short",
               "test_a_wrong_path_is_a_file_not_found_error"}
    assert planted <= set(names)


def test_the_page_names_every_name_the_front_door_exports() -> None:
    """Each export is in the page's table, and each type the table names (capitalized) is an export."""
    text = PAGE.read_text(encoding="utf-8")
    table = text.split("\n## What to import\n", 1)[1].split("\n## ", 1)[0]
    rows = "\n".join(line for line in table.splitlines() if line.startswith("| "))
    named = set(re.findall(r"`([A-Za-z_]\w*)`", rows))
    exported = set(ggaudit.__all__) - {"__version__"}
    assert exported - named == set()
    assert {name for name in named if name[0].isupper()} - exported == set()
    assert all(getattr(ggaudit, name) is not None for name in exported)


def test_each_job_the_page_names_says_what_it_raises() -> None:
    table = PAGE.read_text(encoding="utf-8").split("\n## What to import\n", 1)[1].split("\n## ", 1)[0]
    (jobs,) = [line for line in table.splitlines() if line.startswith("| the jobs |")]
    names = re.findall(r"`(\w+)`", jobs)
    assert "scan" in names and "check_rows" in names
    for name in names:
        doc = getattr(ggaudit, name).__doc__ or ""
        raises = re.search(r"^    Raises:\n        (Format|Read|Usage|Manifest)Error: ", doc, re.MULTILINE)
        assert raises, f"ggaudit.{name}'s docstring lists nothing it raises"


def test_each_misuse_is_one_statement_marked_with_one_error_code() -> None:
    source = (EXAMPLES / "misuse.py").read_text(encoding="utf-8")
    (misuses,) = [node for node in ast.parse(source).body
                  if isinstance(node, ast.FunctionDef) and node.name == "misuses"]
    lines = source.splitlines()
    for statement in misuses.body:
        assert statement.lineno == statement.end_lineno, ast.unparse(statement)
        assert IGNORE.search(lines[statement.lineno - 1]), lines[statement.lineno - 1]
    marked = [n for n, line in enumerate(lines, 1) if "# type: ignore" in line]
    assert marked == [s.lineno for s in misuses.body]          # no misuse outside it, and none unmarked there


def test_ci_runs_the_typing_lane_on_the_readmes_editable_install() -> None:
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert ["scripts/typing_lane.sh"] in [line.split()[:1] for line in ci]
    assert LANE.is_file() and os.access(LANE, os.X_OK)
    lane = LANE.read_text(encoding="utf-8")
    assert r'split("\n## Run the tests\n", 1)' in lane and r'^(pip install -e \S+) && ' in lane
    assert "mypy --strict --warn-unused-ignores --config-file= --python-executable" in lane
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "pip install -e '.[test,dask]' && python -m pytest" in readme.split("\n## Run the tests\n", 1)[1]
