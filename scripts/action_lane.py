"""The GitHub Action's lane: action.yml's steps run here as a runner runs them, on the bundled fixtures.

The steps are read from action.yml (not copied here), their ``${{ ... }}`` expressions evaluated from the
inputs, ``github.*``, ``runner.*`` and the outputs of the steps before, each ``run:`` step run by bash as
GitHub runs it (``bash --noprofile --norc -eo pipefail``) with ``GITHUB_OUTPUT``, ``GITHUB_ENV`` and the
action's path set, and its ``if:`` decided as GitHub decides it. The one ``uses:`` step,
``github/codeql-action/upload-sarif``, needs GitHub: here its ``sarif_file`` is checked instead, against the
SARIF 2.1.0 schema and the limits code scanning documents. An expression this lane does not know fails it,
so an action.yml it cannot run as written never passes.

Usage: python scripts/action_lane.py; exit status 0 when every scenario gave what it should. The action's
path is a copy of the checkout's files (``pip install`` builds in the folder it installs), each scenario's
workspace a temporary folder holding two fixtures.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import yaml

REPO = Path(__file__).resolve().parent.parent
SCHEMA = REPO / "tests" / "data" / "sarif-schema-2.1.0.json"
UPLOAD = "github/codeql-action/upload-sarif@"
CLEAN, INF = "all_types.gguf", "all_types-q4_k-inf.gguf"
#: Where README.md's quick start says the +Inf of the INF fixture is.
INF_AT = (155088, 2)
EXPRESSION = re.compile(r"\$\{\{(.*?)\}\}")
TOKEN = re.compile(r"\s*(?:(\|\||&&|==|!=|!|\(|\))|'((?:[^']|'')*)'|([A-Za-z_][\w.-]*)(\(\))?)")


def fail(message: str) -> None:
    sys.exit(f"action lane: FAILED: {message}")


def log(message: str) -> None:
    print(f"action lane: {message}", file=sys.stderr)


class Runner:
    """One use of the action: its inputs, the contexts its expressions read, the outputs and status of the
    steps run so far, and what the upload step was given."""

    def __init__(self, action: dict[str, Any], given: Mapping[str, str], work: Path, action_path: Path,
                 temp: Path) -> None:
        self.inputs = {name: str(spec.get("default", "")) for name, spec in action["inputs"].items()}
        unknown = set(given) - set(self.inputs)
        if unknown:
            fail(f"action.yml has no input {sorted(unknown)}")
        self.inputs.update(given)
        self.workspace, self.temp = work / "workspace", temp
        self.contexts = {"github.action_path": str(action_path), "github.workspace": str(self.workspace),
                         "runner.temp": str(self.temp), "runner.os": "Linux"}
        self.outputs: dict[str, dict[str, str]] = {}
        self.env: dict[str, str] = {}
        self.failed = False
        self.uploaded: list[str] = []
        self.exit_codes: list[int] = []
        #: The SARIF report the run wrote, read before its workspace goes.
        self.sarif: dict[str, Any] | None = None

    def value(self, name: str) -> str:
        if name.startswith("inputs."):
            return self.inputs[name.removeprefix("inputs.")]
        parts = name.split(".")
        if len(parts) == 4 and parts[0] == "steps" and parts[2] == "outputs":
            return self.outputs.get(parts[1], {}).get(parts[3], "")
        if name not in self.contexts:
            fail(f"action.yml uses ${{{{ {name} }}}}, which this lane does not know")
        return self.contexts[name]

    def evaluate(self, expression: str) -> Any:
        """An expression of GitHub's language as far as action.yml uses it: names, strings, ==, !=, !, &&,
        ||, parentheses and the status functions."""
        functions: dict[str, Callable[[], bool]] = {"always": lambda: True, "success": lambda: not self.failed,
                                                    "failure": lambda: self.failed}
        python, at = [], 0
        expression = expression.strip()
        while at < len(expression):
            token = TOKEN.match(expression, at)
            if token is None or token.end() == at:
                fail(f"action.yml's expression {expression!r}: this lane cannot read it at {expression[at:]!r}")
            operator, string, name, call = token.groups()
            at = token.end()
            if operator:
                python.append({"&&": "and", "||": "or", "!": "not"}.get(operator, operator))
            elif string is not None:
                python.append(repr(string.replace("''", "'")))
            elif call:
                if name not in functions:
                    fail(f"action.yml calls {name}(), which this lane does not know")
                python.append(f"f[{name!r}]()")
            else:
                python.append(repr(self.value(name)))
        return eval(" ".join(python), {"__builtins__": {}, "f": functions})

    def substitute(self, text: str) -> str:
        return EXPRESSION.sub(lambda m: str(self.evaluate(m.group(1))), text)

    def wanted(self, step: dict[str, Any]) -> bool:
        condition = str(step.get("if", "success()")).strip()
        if condition.startswith("${{") and condition.endswith("}}"):
            condition = condition[3:-2]
        # GitHub adds success() to a condition that calls no status function.
        if not re.search(r"\b(always|success|failure|cancelled)\(\)", condition):
            condition = f"success() && ({condition})"
        return bool(self.evaluate(condition))

    def run(self, steps: list[dict[str, Any]]) -> None:
        for number, step in enumerate(steps, 1):
            name = step.get("name", f"step {number}")
            if not self.wanted(step):
                log(f"  {name}: skipped, as its if: says")
                continue
            if "uses" in step:
                self.uses(step)
            else:
                self.script(step)
            log(f"  {name}: {'failed' if self.failed else 'done'}")

    def script(self, step: dict[str, Any]) -> None:
        if step.get("shell") != "bash":
            fail(f"step {step.get('name')}: shell {step.get('shell')!r}; this lane runs bash steps")
        files = {name: self.temp / f"{name}.{len(self.exit_codes)}" for name in ("GITHUB_OUTPUT", "GITHUB_ENV")}
        for f in files.values():
            f.write_text("")
        script = self.temp / "step.sh"
        script.write_text(self.substitute(step["run"]))
        env = {**os.environ, **self.env, **{k: self.substitute(str(v)) for k, v in step.get("env", {}).items()},
               **{k: str(v) for k, v in files.items()}, "GITHUB_ACTION_PATH": self.contexts["github.action_path"],
               "GITHUB_WORKSPACE": str(self.workspace), "RUNNER_TEMP": str(self.temp), "CI": "true"}
        done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], env=env,
                              cwd=self.workspace, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in done.stdout.splitlines():
            log(f"    | {line}")
        self.exit_codes.append(done.returncode)
        self.failed = self.failed or done.returncode != 0
        self.env.update(_pairs(files["GITHUB_ENV"]))
        if "id" in step:
            self.outputs[step["id"]] = _pairs(files["GITHUB_OUTPUT"])

    def uses(self, step: dict[str, Any]) -> None:
        if not str(step["uses"]).startswith(UPLOAD):
            fail(f"step {step.get('name')} uses {step['uses']}; this lane stands in for {UPLOAD} only")
        given = {k: self.substitute(str(v)) for k, v in step.get("with", {}).items()}
        sarif = self.workspace / given["sarif_file"]
        check_for_code_scanning(sarif)
        self.uploaded.append(given["sarif_file"])


def _pairs(path: Path) -> dict[str, str]:
    """The NAME=VALUE lines a step wrote to GITHUB_OUTPUT or GITHUB_ENV (the one-line form)."""
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def check_for_code_scanning(sarif: Path) -> None:
    """What upload-sarif and code scanning require of the file: the SARIF 2.1.0 schema, a startLine in
    every region, a fingerprint and a category per run, and the documented limits."""
    text = sarif.read_text(encoding="utf-8")
    log_ = json.loads(text)
    jsonschema.Draft4Validator(json.loads(SCHEMA.read_text(encoding="utf-8"))).validate(log_)
    runs = log_["runs"]
    ids = [run["automationDetails"]["id"] for run in runs]
    if len(runs) > 20 or len(set(ids)) != len(ids) or len(gzip.compress(text.encode())) > 10_000_000:
        fail(f"{sarif}: {len(runs)} runs, categories {ids}: more than code scanning takes")
    for result in (r for run in runs for r in run["results"]):
        if result["locations"][0]["physicalLocation"]["region"].get("startLine") != 1 \
                or "ggauditFinding/v1" not in result.get("partialFingerprints", {}):
            fail(f"{sarif}: a result without startLine or fingerprint: {result['ruleId']}")


def scenario(action: dict[str, Any], given: dict[str, str], action_path: Path, temp: Path) -> Runner:
    with tempfile.TemporaryDirectory(prefix="ggaudit-action-") as tmp:
        work = Path(tmp)
        (work / "workspace" / "models").mkdir(parents=True)
        for name in (CLEAN, INF):
            shutil.copy(REPO / "fixtures" / name, work / "workspace" / "models" / name)
        runner = Runner(action, given, work, action_path, temp)
        log(f"with {given}:")
        runner.run(action["runs"]["steps"])
        runner.sarif = _read_sarif(runner)
    return runner


def _read_sarif(runner: Runner) -> dict[str, Any] | None:
    written = runner.outputs.get("ggaudit", {}).get("sarif-file")
    return json.loads((runner.workspace / written).read_text(encoding="utf-8")) if written else None


def main() -> None:
    action = yaml.safe_load((REPO / "action.yml").read_text(encoding="utf-8"))
    if action["runs"]["using"] != "composite":
        fail("action.yml is not a composite action")
    with tempfile.TemporaryDirectory(prefix="ggaudit-action-path-") as tmp:
        action_path, temp = Path(tmp) / "ggaudit", Path(tmp) / "runner-temp"
        _copy_checkout(action_path)
        temp.mkdir()
        # One runner's temporary folder for both, as a runner that keeps it: the second install is quicker.
        found = scenario(action, {"models": "models/*.gguf", "args": "--fail-on nonfinite"}, action_path, temp)
        clean = scenario(action, {"models": f"models/{CLEAN}", "upload": "false"}, action_path, temp)
    _expect_found(found)
    _expect_clean(clean)
    log("passed")


def _expect_found(runner: Runner) -> None:
    """Both fixtures scanned: exit 1, the SARIF uploaded, a run each, the +Inf where the README says."""
    outputs, sarif = runner.outputs.get("ggaudit", {}), runner.sarif
    if outputs.get("exit-code") != "1" or runner.uploaded != ["ggaudit.sarif"] or sarif is None:
        fail(f"findings: outputs {outputs}, uploaded {runner.uploaded}; want exit-code 1 and ggaudit.sarif uploaded")
    ids = [run["automationDetails"]["id"] for run in sarif["runs"]]
    if ids != [f"ggaudit/scan/models/{INF}/", f"ggaudit/scan/models/{CLEAN}/"]:
        fail(f"findings: runs {ids}; want one per fixture")
    found = [(r["ruleId"], r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
              r["locations"][0]["physicalLocation"]["region"]["byteOffset"],
              r["locations"][0]["physicalLocation"]["region"]["byteLength"]) for r in sarif["runs"][0]["results"]]
    if found != [("+inf", f"models/{INF}", *INF_AT)] or sarif["runs"][1]["results"] != []:
        fail(f"findings: results {found}, {sarif['runs'][1]['results']}")
    if runner.exit_codes[-1] != 1:
        fail(f"findings: the last step exits {runner.exit_codes[-1]}; the job must fail with ggaudit's 1")
    log("findings: exit 1, one +inf result at the README's offset, uploaded, the job failed")


def _expect_clean(runner: Runner) -> None:
    outputs = runner.outputs.get("ggaudit", {})
    if outputs.get("exit-code") != "0" or runner.uploaded or runner.failed:
        fail(f"clean: outputs {outputs}, uploaded {runner.uploaded}, failed {runner.failed}")
    log("clean: exit 0, upload: false skipped the upload, the job passed")


def _copy_checkout(to: Path) -> None:
    """The checkout's tracked and untracked, not ignored, files (uncommitted work included), as the action's
    own folder on a runner holds them."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            check=True, stdout=subprocess.PIPE).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (to / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, to / name)


if __name__ == "__main__":
    main()
