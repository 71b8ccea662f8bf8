"""Issue 28: one read, every output. Several ``-o FILE`` from one run (each file's name picks its format
unless --format says otherwise), the summary on stderr when every report goes to a file, a split set named
by all its shards as one model, ``--fail-on`` by kind, family or severity, ``manifest --require-clean``,
hints for bare names that a store holds, and ``verify ollama:*`` counting its models and the store apart."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from ggaudit.format.blocks import GGMLQuantizationType as T
from ggaudit.format.build import TensorSpec, write_gguf
from ggaudit.kinds import FAMILIES, KINDS, family
from ollama_support import ollama_store
from support import assert_one_line_error, run_cli, write_small_model, write_split_set, write_trailing_model


def _nan_model(path: Path) -> Path:
    """One F32 tensor of 8 values; element 3 is a NaN (its file offset is in the text report)."""
    values = np.arange(8, dtype=np.float32)
    values[3] = np.float32("nan")
    write_gguf(path, [TensorSpec("a.weight", T.F32, (8,), values.tobytes())], {"general.architecture": "llama"})
    return path



# --- 1. several -o FILE, each in the format its name ends with ---------------------------------------

def test_each_report_file_gets_the_format_its_name_ends_with(tmp_path: Path) -> None:
    model = _nan_model(tmp_path / "nan.gguf")
    names = ["r.sarif", "r.xml", "r.html", "r.json", "r.txt"]
    result = run_cli(["scan", model, *[a for n in names for a in ("-o", tmp_path / n)]])
    assert result.exit_code == 1 and result.stdout == ""
    assert (tmp_path / "r.txt").read_text() == run_cli(["scan", model]).stdout
    doc = json.loads((tmp_path / "r.json").read_text())
    finding = doc["models"][0]["tensors"][0]["findings"][0]
    assert (doc["status"], finding["kind"], finding["offset"], finding["bits"]) == (
        "findings", "nan", 140, "0x7fc00000")
    sarif = json.loads((tmp_path / "r.sarif").read_text())
    assert [r["ruleId"] for r in sarif["runs"][0]["results"]] == ["nan"]
    assert ET.parse(tmp_path / "r.xml").getroot().attrib["failures"] == "1"
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")


def test_format_given_once_per_file_is_paired_in_order(tmp_path: Path) -> None:
    model = _nan_model(tmp_path / "nan.gguf")
    result = run_cli(["scan", model, "--format", "sarif", "-o", tmp_path / "a.out",
                      "--format", "junit", "-o", tmp_path / "b.out"])
    assert result.exit_code == 1
    assert json.loads((tmp_path / "a.out").read_text())["version"] == "2.1.0"
    assert ET.parse(tmp_path / "b.out").getroot().tag == "testsuites"


def test_format_count_other_than_the_files_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    model = _nan_model(tmp_path / "nan.gguf")
    result = run_cli(["scan", model, "--format", "json", "-o", tmp_path / "a.sarif", "-o", tmp_path / "b.xml"])
    assert assert_one_line_error(result) == (
        "ggaudit: error: --format: given once for 2 -o FILE: give one --format per -o FILE, in the same order, "
        "or none (each FILE's name ends as its format: .sarif.json, .sarif, .xml, .html, .htm, .json, .txt)")
    assert sorted(os.listdir(tmp_path)) == ["nan.gguf"]


def test_one_report_file_named_twice_is_refused(tmp_path: Path) -> None:
    model = _nan_model(tmp_path / "nan.gguf")
    again = tmp_path / "sub" / ".." / "a.sarif"
    (tmp_path / "sub").mkdir()
    result = run_cli(["scan", model, "-o", tmp_path / "a.sarif", "-o", again])
    assert assert_one_line_error(result) == f"ggaudit: error: {again}: -o: given twice: each report needs its own file"


def test_every_command_takes_several_report_files(tmp_path: Path) -> None:
    model = write_small_model(tmp_path / "m.gguf")
    runs = {"info": ["info", model], "diff": ["diff", model, model], "check": ["check", model, "--modes", "buffered"],
            "rows": ["rows", model, "--ids", "0-3", "--modes", "buffered"],
            "verify": ["verify", model, "--sha256", "0" * 64]}
    for name, args in runs.items():
        json_file, xml_file = tmp_path / f"{name}.json", tmp_path / f"{name}.xml"
        result = run_cli([*args, "-o", json_file, "-o", xml_file])
        status = json.loads(json_file.read_text())["status"]
        assert (name, result.exit_code) == (name, {"clean": 0, "findings": 1}[status]), result.stderr
        assert ET.parse(xml_file).getroot().tag == "testsuites", name


def test_manifest_report_files_go_on_report_and_a_report_name_on_o_is_refused(tmp_path: Path) -> None:
    model = write_small_model(tmp_path / "m.gguf")
    result = run_cli(["manifest", model, "--format", "junit", "-o", tmp_path / "x.xml"])
    assert assert_one_line_error(result) == (
        f"ggaudit: error: {tmp_path / 'x.xml'}: -o: is the manifest this command writes, not a report, yet its "
        "name ends as a junit report's: write reports with --report FILE")
    assert not (tmp_path / "x.xml").exists()
    result = run_cli(["manifest", model, "-o", tmp_path / "m.manifest.json", "--report", tmp_path / "r.xml",
                      "--report", tmp_path / "r.json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads((tmp_path / "m.manifest.json").read_text())["files"][0]["size"] == model.stat().st_size
    assert json.loads((tmp_path / "r.json").read_text())["status"] == "clean"
    assert ET.parse(tmp_path / "r.xml").getroot().attrib["failures"] == "0"


# --- 2. the summary on stderr when every report goes to a file --------------------------------------------

def test_summary_goes_to_stderr_only_when_no_report_goes_to_stdout(tmp_path: Path) -> None:
    nan, clean = _nan_model(tmp_path / "nan.gguf"), write_small_model(tmp_path / "m.gguf")
    to_files = run_cli(["scan", nan, clean, "-o", tmp_path / "r.sarif", "-q"])
    assert (to_files.exit_code, to_files.stdout) == (1, "")
    assert to_files.stderr == f"model {nan}: 1 finding (nan 1)\nmodel {clean}: clean\n"
    also_stdout = run_cli(["scan", nan, "-o", tmp_path / "r.sarif", "-o", "-"])
    assert also_stdout.stderr == "" and also_stdout.stdout == run_cli(["scan", nan]).stdout


# --- 3. a split set named by all its shards is one model ---------------------------------------------

def test_every_shard_of_a_split_set_named_is_one_model(tmp_path: Path) -> None:
    first, second = write_split_set(tmp_path)
    for command in ("scan", "info"):
        both = run_cli([command, first, second, "--json"])
        assert both.exit_code == 0, both.stderr
        assert len(json.loads(both.stdout)["models"]) == 1
        assert run_cli([command, first, second]).stdout == run_cli([command, first]).stdout


# --- 4. --fail-on --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("fail_on", "status"), [("structure", 0), ("nonfinite", 1), ("nan", 1), ("error", 1),
                                                 ("warning", 0), ("digest,anomaly", 0)])
def test_fail_on_selects_which_findings_fail_the_run(tmp_path: Path, fail_on: str, status: int) -> None:
    result = run_cli(["scan", _nan_model(tmp_path / "nan.gguf"), "--fail-on", fail_on])
    assert result.exit_code == status
    assert "nan at file" in result.stdout          # reported either way


def test_fail_on_a_structure_finding(tmp_path: Path) -> None:
    model = write_trailing_model(tmp_path / "t.gguf")
    assert run_cli(["scan", model, "--fail-on", "nonfinite"]).exit_code == 0
    assert run_cli(["scan", model, "--fail-on", "nonfinite", "--fail-on", "structure"]).exit_code == 1
    assert run_cli(["scan", model]).exit_code == 1        # the default: every finding fails


def test_fail_on_an_unknown_name_is_refused() -> None:
    result = run_cli(["scan", "any.gguf", "--fail-on", "nan,bogus"])
    assert assert_one_line_error(result) == (
        "ggaudit: error: --fail-on: bogus is no kind, family or severity: give nonfinite, outlier, anomaly, "
        "structure, read-path, digest, metadata, template, diff, error, warning, note or a kind's id "
        "(docs/output.md)")


def test_every_kind_is_in_one_family() -> None:
    assert [k for k in KINDS if family(k) not in FAMILIES] == []
    assert (family("rows/nonfinite"), family("rows/stale"), family("check/read-path-differs"),
            family("verify/sha256"), family("trailing"), family("metadata/x")) == (
        "nonfinite", "read-path", "read-path", "digest", "structure", "metadata")


# --- 5. manifest --require-clean -----------------------------------------------------------------------

def test_require_clean_writes_no_manifest_for_a_damaged_file(tmp_path: Path) -> None:
    nan = _nan_model(tmp_path / "nan.gguf")
    result = run_cli(["manifest", nan, "-o", tmp_path / "m.json", "--require-clean"])
    assert result.exit_code == 1
    # The finding that blocked it, named (issue 35): where, what was expected and found.
    assert result.stderr == (f"ggaudit: {nan}: no manifest written (--require-clean): the scan found what a "
                             f"good file never holds: nan at file {nan} offset 140, length 4: tensor a.weight, row 0, "
                             "column 3: expected finite, got 0x7fc00000 (nan)\n")
    assert "nan at file" in result.stdout and not (tmp_path / "m.json").exists()
    trailing = write_trailing_model(tmp_path / "t.gguf")
    assert run_cli(["manifest", trailing, "-o", tmp_path / "m.json", "--require-clean"]).exit_code == 1
    assert not (tmp_path / "m.json").exists()
    clean = write_small_model(tmp_path / "ok.gguf")
    written = run_cli(["manifest", clean, "-o", tmp_path / "m.json", "--require-clean"])
    assert written.exit_code == 0 and (tmp_path / "m.json").is_file()


# --- 8. hints for bare names a store holds -----------------------------------------------------------

def test_a_bare_name_of_an_ollama_model_says_the_store_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = write_small_model(tmp_path / "m.gguf").read_bytes()
    ollama_store(tmp_path / "store", model, model, name="clef-flash")
    monkeypatch.chdir(tmp_path)
    for name in ("clef-flash", "clef-flash:latest"):
        result = run_cli(["scan", name, "--store", tmp_path / "store"])
        assert assert_one_line_error(result) == f"ggaudit: error: {name}: no such file; did you mean ollama:{name}?"
    other = run_cli(["scan", "other-model", "--store", tmp_path / "store"])
    assert assert_one_line_error(other) == "ggaudit: error: other-model: cannot open: No such file or directory"


def test_a_bare_org_name_in_the_hugging_face_cache_says_the_store_name(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "hub" / "models--org--tiny" / "snapshots").mkdir(parents=True)
    monkeypatch.setenv("HF_HUB_CACHE", os.fspath(tmp_path / "hub"))
    monkeypatch.chdir(tmp_path)
    result = run_cli(["info", "org/tiny"])
    assert assert_one_line_error(result) == "ggaudit: error: org/tiny: no such file; did you mean hf:org/tiny?"


# --- 9. verify ollama:* counts its models and the store apart --------------------------------------------

def test_verify_every_ollama_model_counts_the_models_and_the_store_apart(tmp_path: Path) -> None:
    model = write_small_model(tmp_path / "m.gguf").read_bytes()
    ollama_store(tmp_path / "store", model, model[:-1])
    result = run_cli(["verify", "ollama:*", "--store", tmp_path / "store"])
    assert result.exit_code == 0, result.stdout
    assert result.stdout.splitlines()[-1] == "1 model and 1 store: 0 with findings, 2 clean, 0 errors"


# --- 6. HTML: the first screen says it ---------------------------------------------------------------

def test_html_first_screen_is_the_verdict_and_an_index_then_the_pictures(tmp_path: Path) -> None:
    nan, clean = _nan_model(tmp_path / "nan.gguf"), write_small_model(tmp_path / "m.gguf")
    run_cli(["scan", nan, clean, "-o", tmp_path / "r.html"])
    page = (tmp_path / "r.html").read_text()
    verdict = page[page.index('<section class="verdict">'):page.index("</section>")]
    nan_line = (f"nan at file {nan} offset 140, length 4: tensor a.weight, row 0, column 3: expected finite, "
                "got 0x7fc00000")
    assert verdict.count("<a href=") == 2 and f'<a href="#target-1">model {nan}: 1 finding (nan 1)</a>' in verdict
    assert f'<a href="#target-2">model {clean}: clean</a>' in verdict and nan_line in verdict
    assert page.index(nan_line) < page.index("<svg") and '<section id="target-2">' in page
    under_map = page[page.index(f"<h3>Map of {nan}</h3>"):page.index('<section id="target-2">')]
    listed = under_map[under_map.index("</svg>"):under_map.index("</ol>")]       # the map's tooltip, as text too
    assert listed.count("<li>") == 1 and nan_line in listed
    assert "<details><summary>1 tensor without findings</summary>" not in under_map
    assert "<details open><summary>1 tensor without findings</summary>" in page      # m.gguf: none flagged


# --- 10. Windows install ------------------------------------------------------------------------------

def test_the_windows_install_commands_are_one_per_line_and_the_lane_runs_them() -> None:
    repo = Path(__file__).resolve().parent.parent
    page, readme = (repo / "docs" / "install.md").read_text(), (repo / "README.md").read_text()
    windows = page[page.index("## Windows"):page.index("## The first command")]
    steps = "py -m pip install .\nggaudit --version\n"
    assert steps in windows and steps in readme
    assert "pipx install " in windows and "&&" not in windows.replace("rejects `&&`", "")
    lane = (repo / "scripts" / "windows_lane.sh").read_text()
    assert '-m ggaudit --version' in lane and 'pip wheel -q --no-deps' in lane
    assert "scripts/windows_lane.sh --installed" in (repo / ".ci" / "run").read_text()
