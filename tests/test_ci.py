"""docs/ci.md against what it describes: its workflow uses action.yml's real inputs and gives ggaudit a command
line ggaudit takes, its pre-commit configuration names real hooks, each hook is a ggaudit command on GGUF
files, the action's inputs reach its scripts as data only (its run step, run here with this checkout's ggaudit:
globs expanded, a name's shell code never run), and CI runs the lane that runs every step and both hooks
(scripts/action_lane.sh: too slow for the suite, it installs ggaudit three times)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from ggaudit.cli import main
from ggaudit.cli.reporters import fail_on_kinds

from support import FIXTURES, REPO

CI_PAGE = REPO / "docs" / "ci.md"
ACTION = yaml.safe_load((REPO / "action.yml").read_text(encoding="utf-8"))
HOOKS = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
LANE = REPO / "scripts" / "action_lane.sh"


def _yaml_blocks() -> list[Any]:
    text = CI_PAGE.read_text(encoding="utf-8")
    return [yaml.safe_load(block) for block in re.findall(r"^```yaml\n(.*?)^```$", text, re.DOTALL | re.MULTILINE)]


def _workflow() -> dict[str, Any]:
    (workflow,) = [b for b in _yaml_blocks() if "jobs" in b]
    return workflow


def _parsed(words: list[str]) -> click.Context:
    """ggaudit's own parse of a command line (``ggaudit`` left out): a command or option it does not know
    raises click's UsageError, as the command line would say it."""
    command = main.get_command(click.Context(main), words[0])
    assert command is not None, f"ggaudit has no command {words[0]}"
    return command.make_context(words[0], words[1:])


def test_the_pages_workflow_uses_the_actions_inputs_and_gives_ggaudit_a_command_line_it_takes() -> None:
    workflow = _workflow()
    assert workflow["permissions"]["security-events"] == "write"      # what upload-sarif needs
    (job,) = workflow["jobs"].values()
    (step,) = [s for s in job["steps"] if str(s.get("uses", "")).startswith("OWNER/ggaudit@")]
    given, inputs = step["with"], ACTION["inputs"]
    assert set(given) <= set(inputs)
    assert {name for name, spec in inputs.items() if spec.get("required")} <= set(given)
    # The command line the action's run step makes of them (models and args split on spaces).
    words = [given.get("command", inputs["command"]["default"]), *given["models"].split(), *given["args"].split(),
             "-o", inputs["sarif-file"]["default"], "-o", "-"]
    assert words[:2] == ["scan", "models/*.gguf"]
    ctx = _parsed(words)
    assert ctx.params["fail_on"] == ("nonfinite,structure",)
    assert fail_on_kinds(ctx.params["fail_on"]) == frozenset({"nonfinite", "structure"})


def test_a_command_line_ggaudit_does_not_take_fails_the_parse() -> None:
    # click 8.0 words it "No such option: --fail-onn", later releases "No such option '--fail-onn'".
    with pytest.raises(click.UsageError, match=r"No such option:? '?--fail-onn\b"):
        _parsed(["scan", "models/m.gguf", "--fail-onn", "nonfinite"])


def test_the_actions_inputs_reach_its_scripts_as_environment_variables_only() -> None:
    steps = ACTION["runs"]["steps"]
    assert ACTION["runs"]["using"] == "composite"
    scripts = [s["run"] for s in steps if "run" in s]
    assert len(scripts) == 3 and not any("${{" in script for script in scripts)
    expressions = re.findall(r"\$\{\{(.*?)\}\}", (REPO / "action.yml").read_text(encoding="utf-8"))
    used = {name for e in expressions for name in re.findall(r"\binputs\.([\w-]+)", e)}
    assert used == set(ACTION["inputs"])                   # every input used, none undeclared
    install, run, upload, verdict = steps
    assert install["env"]["GGAUDIT_SOURCE"] == "${{ github.action_path }}"
    assert 'pip install --quiet --disable-pip-version-check "$GGAUDIT_SOURCE"' in install["run"]
    assert '-o "$GGAUDIT_SARIF" -o -' in run["run"] and run["id"] == "ggaudit"
    assert upload["uses"].startswith("github/codeql-action/upload-sarif@")
    assert upload["with"] == {"sarif_file": "${{ steps.ggaudit.outputs.sarif-file }}"}
    assert verdict["env"] == {"GGAUDIT_EXIT": "${{ steps.ggaudit.outputs.exit-code }}"}


def test_each_hook_is_a_ggaudit_command_on_gguf_files_and_the_pages_configuration_names_them() -> None:
    ids = [hook["id"] for hook in HOOKS]
    assert ids == ["ggaudit-scan", "ggaudit-check"]
    for hook in HOOKS:
        words = shlex.split(hook["entry"])
        assert words[0] == "ggaudit" and hook["language"] == "python"
        _parsed([*words[1:], "models/a.gguf", "models/b-00001-of-00002.gguf"])   # pre-commit appends the files
        files = re.compile(hook["files"])
        assert [bool(files.search(name)) for name in ("m.gguf", "models/x-00001-of-00002.gguf", "m.gguf.bak",
                                                      "notes.txt")] == [True, True, False, False]
    (config,) = [b for b in _yaml_blocks() if "repos" in b]
    (repo,) = config["repos"]
    assert {hook["id"] for hook in repo["hooks"]} <= set(ids)


def test_ci_runs_the_lane_of_the_action_and_the_hooks() -> None:
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert ["scripts/action_lane.sh"] in [line.split()[:1] for line in ci]
    assert LANE.is_file() and os.access(LANE, os.X_OK)
    lane = LANE.read_text(encoding="utf-8")
    assert "python3 scripts/action_lane.py" in lane and 'try-repo "$work/hooks"' in lane
    runner = (REPO / "scripts" / "action_lane.py").read_text(encoding="utf-8")
    assert 'REPO / "action.yml"' in runner and "jsonschema.Draft4Validator" in runner


def _run_step(tmp_path: Path, models: str, args: str = "") -> tuple[int, dict[str, str], str]:
    """action.yml's "Run ggaudit" script, as a runner runs it (bash -eo pipefail, its inputs in the
    environment, GITHUB_OUTPUT), in a workspace holding two fixtures, with this checkout's ggaudit."""
    if os.name == "nt" or shutil.which("bash") is None:
        pytest.skip("the action's steps are bash scripts, run here as on a Linux runner")
    workspace = tmp_path / "workspace"
    (workspace / "models").mkdir(parents=True)
    for name in ("all_types.gguf", "all_types-q4_k-inf.gguf"):
        shutil.copy(FIXTURES / name, workspace / "models" / name)
    ggaudit = tmp_path / "ggaudit"
    ggaudit.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m ggaudit "$@"\n')
    ggaudit.chmod(0o755)
    (step,) = [s for s in ACTION["runs"]["steps"] if s.get("id") == "ggaudit"]
    (tmp_path / "step.sh").write_text(step["run"])
    output = tmp_path / "github-output"
    output.write_text("")
    env = {**os.environ, "GGAUDIT": str(ggaudit), "GGAUDIT_COMMAND": "scan", "GGAUDIT_MODELS": models,
           "GGAUDIT_ARGS": args, "GGAUDIT_SARIF": "ggaudit.sarif", "GITHUB_OUTPUT": str(output),
           "PYTHONPATH": str(REPO)}
    done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(tmp_path / "step.sh")], env=env,
                          cwd=workspace, capture_output=True, text=True, timeout=120)
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines())
    return done.returncode, outputs, done.stdout + done.stderr


def test_the_run_step_expands_the_models_glob_and_writes_the_sarif_and_the_exit_code(tmp_path: Path) -> None:
    status, outputs, log = _run_step(tmp_path, "models/*.gguf", "--fail-on nonfinite")
    assert status == 0 and outputs == {"exit-code": "1", "sarif-file": "ggaudit.sarif"}
    sarif = json.loads((tmp_path / "workspace" / "ggaudit.sarif").read_text(encoding="utf-8"))
    assert [run["automationDetails"]["id"] for run in sarif["runs"]] == [
        "ggaudit/scan/models/all_types-q4_k-inf.gguf/", "ggaudit/scan/models/all_types.gguf/"]
    assert "  +inf at file models/all_types-q4_k-inf.gguf offset 155088, length 2: " in log      # the text, to the log


def test_a_model_name_reaches_ggaudit_as_data_not_shell_code(tmp_path: Path) -> None:
    status, outputs, log = _run_step(tmp_path, "models/$(touch${IFS}pwned).gguf")
    assert status == 0 and outputs == {"exit-code": "2", "sarif-file": "ggaudit.sarif"}
    assert "ggaudit: error: models/$(touch${IFS}pwned).gguf: " in log
    assert not (tmp_path / "workspace" / "pwned").exists()
    (run,) = json.loads((tmp_path / "workspace" / "ggaudit.sarif").read_text(encoding="utf-8"))["runs"]
    assert run["invocations"][0]["executionSuccessful"] is False       # the upload says the model was not read
