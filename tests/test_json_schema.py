"""Every command's --json output validates against the JSON Schema shipped in the package.

Each case runs a command through the CLI (clean, with findings, one target and several, a target that
fails) and checks three things: the document validates against ggaudit/schema/cli-output.schema.json,
its ``status`` and the exit status say the same, and its ``models`` are the reports (or failures) the
case expects, in order. A schema that accepted anything would pass the first check alone: the last tests
show documents that are wrong in one way each and are refused.
"""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
from importlib import resources
from pathlib import Path
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from jsonschema import Draft202012Validator

import ggaudit
from ggaudit.format.build import TensorSpec, write_gguf
from ggaudit.format.layout import open_model
from gguf import GGMLQuantizationType as GGMLType

from ollama_support import ollama_store
from stores_support import gpt4all_folder, hf_local_dir, lmstudio_models, ollama_everything
from support import FIXTURES, load_script, run_cli

SCHEMA = json.loads(resources.files("ggaudit").joinpath("schema/cli-output.schema.json").read_text("utf-8"))
VALIDATOR = Draft202012Validator(SCHEMA)

CLEAN = FIXTURES / "all_types.gguf"
NAN = FIXTURES / "all_types-f32-nan.gguf"
INF = FIXTURES / "all_types-q4_k-inf.gguf"
PLE = FIXTURES / "ple_iq4_nl.gguf"
SPLIT = FIXTURES / "split-00001-of-00002.gguf"

SCAN, VERIFY, ROWS = "ggaudit/scan-report/1", "ggaudit/verify-report/1", "ggaudit/rows-report/1"
DIFF, INFO, MANIFEST, FAILED = "ggaudit/diff-report/1", "ggaudit/info/1", "ggaudit-tensor-manifest", "failed"
LLAMA = "llama-gguf-hash"
CHECK = "ggaudit/check-report/1"
STATUS_OF_EXIT = {0: "clean", 1: "findings", 2: "error"}


def errors(doc: Any) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in VALIDATOR.iter_errors(doc)]


def kind(element: dict[str, Any]) -> str:
    """What an element of ``models`` is: its schema id, the manifest's format, or "failed"."""
    if "error" in element:
        return FAILED
    return str(element.get("schema", element.get("format")))


def blob_of(source: Path, folder: Path, *, damage: bool = False) -> Path:
    """A copy of ``source`` named by its sha256, as a content-addressed store keeps it (bytes changed after
    naming when ``damage``)."""
    data = source.read_bytes()
    blob = folder / f"sha256-{hashlib.sha256(data).hexdigest()}"
    blob.write_bytes(data[:-1] + bytes([data[-1] ^ 1]) if damage else data)
    return blob


def manifest_of(model: Path, tmp: Path) -> Path:
    out = tmp / f"{model.stem}.manifest.json"
    assert run_cli(["manifest", model, "-o", out]).exit_code == 0
    return out


def damaged_against_manifest(tmp: Path) -> list[Any]:
    """A copy of PLE with one byte of its table changed, against the manifest of the original."""
    manifest = manifest_of(PLE, tmp)
    damaged = tmp / PLE.name
    shutil.copyfile(PLE, damaged)
    t = open_model(damaged).tensor("per_layer_token_embd.weight")
    with open(damaged, "r+b") as f:
        f.seek(t.offset + 3 * t.row_bytes + 5)
        f.write(b"\x55")
    return [damaged, "--manifest", manifest]


def damaged_against_llama_hash(tmp: Path) -> list[Any]:
    """The same damage, against llama-gguf-hash lines (every type) of the original."""
    manifest = tmp / "m.hash"
    assert run_cli(["manifest", PLE, "-o", manifest, "--manifest-format", LLAMA, "--hash", "all"]).exit_code == 0
    return [damaged_against_manifest(tmp)[0], "--manifest", manifest]


def misplaced_capture(tmp: Path) -> Path:
    """An engine capture of rows 7 and 8 of PLE's table in which row 8 holds row 9's bytes."""
    t = open_model(PLE).tensor("per_layer_token_embd.weight")
    data = PLE.read_bytes()
    rows = np.stack([np.frombuffer(data[t.row_offset(r):t.row_offset(r) + t.row_bytes], np.uint8) for r in (7, 9)])
    np.savez(tmp / "cap.npz", ids=np.array([7, 8]), rows=rows)
    return tmp / "cap.npz"


def sums_file(tmp: Path) -> Path:
    (tmp / "good.bin").write_bytes(b"good")
    (tmp / "bad.bin").write_bytes(b"bad")
    good = hashlib.sha256(b"good").hexdigest()
    (tmp / "SHA256SUMS").write_text(f"{good}  good.bin\n{'0' * 64}  bad.bin\n{good}  gone.bin\n")
    return tmp / "SHA256SUMS"


def store(tmp: Path) -> Path:
    ollama_store(tmp / "store", CLEAN.read_bytes(), PLE.read_bytes())
    return tmp / "store"


def appended(tmp: Path) -> Path:
    """CLEAN with 28 bytes after its last tensor (a structure finding), and 0xFF in its header padding."""
    model = open_model(CLEAN).files[0]
    data = bytearray(CLEAN.read_bytes())
    data[model.header_end] = 0xFF
    path = tmp / "appended.gguf"
    path.write_bytes(bytes(data) + b"payload!" * 3 + b"1234")
    return path


def experts(tmp: Path) -> Path:
    """A mixture-of-experts tensor with a NaN in expert 5."""
    values = np.ones((8, 4, 8), dtype="<f4")
    values[5, 2, 3] = np.nan
    path = tmp / "moe.gguf"
    write_gguf(path, [TensorSpec("blk.0.ffn_up_exps.weight", GGMLType.F32, (8, 4, 8), values.tobytes())])
    return path


Case = Callable[[Path], list[Any]]

#: id -> (arguments after the command name, built in a temporary folder; exit status; kinds of the models).
CASES: dict[str, tuple[Case, int, list[str]]] = {
    "scan-clean": (lambda t: ["scan", CLEAN], 0, [SCAN]),
    "scan-split-set": (lambda t: ["scan", SPLIT, "--sha256"], 1, [SCAN]),      # a fragment: missing tensors
    "scan-findings": (lambda t: ["scan", NAN, "--deep", "--max-abs", "0.5", "--limit", "2", "--sha256"], 1, [SCAN]),
    "scan-fail-fast": (lambda t: ["scan", INF, "--fail-fast"], 1, [SCAN]),
    "scan-several": (lambda t: ["scan", CLEAN, NAN, INF, "--jobs", "2"], 1, [SCAN, SCAN, SCAN]),
    "scan-ollama-model-and-projector": (lambda t: ["scan", "ollama:tiny", "--store", store(t)], 0, [SCAN, SCAN]),
    "scan-one-fails": (lambda t: ["scan", CLEAN, t / "missing.gguf", NAN], 2, [SCAN, FAILED, SCAN]),
    "scan-fails": (lambda t: ["scan", t / "missing.gguf"], 2, [FAILED]),
    "scan-structure": (lambda t: ["scan", appended(t), "--sha256"], 1, [SCAN]),
    "scan-experts": (lambda t: ["scan", experts(t)], 1, [SCAN]),
    "verify-blob": (lambda t: ["verify", blob_of(CLEAN, t)], 0, [VERIFY]),
    "verify-blobs": (lambda t: ["verify", blob_of(CLEAN, t), blob_of(NAN, t, damage=True), t / ("sha256-" + "ab" * 32)],
                     1, [VERIFY, VERIFY, VERIFY]),
    "verify-ollama": (lambda t: ["verify", "ollama:tiny", "--store", store(t)], 0, [VERIFY]),
    "verify-ollama-quick": (lambda t: ["verify", "ollama:tiny", "--store", store(t), "--quick"], 0, [VERIFY]),
    "verify-manifest": (lambda t: ["verify", PLE, "--manifest", manifest_of(PLE, t)], 0, [VERIFY]),
    "verify-manifest-damaged": (lambda t: ["verify", *damaged_against_manifest(t)], 1, [VERIFY]),
    "verify-llama-hash-damaged": (lambda t: ["verify", *damaged_against_llama_hash(t)], 1, [VERIFY]),
    "verify-sums": (lambda t: ["verify", "--sums", sums_file(t)], 1, [VERIFY]),
    "verify-one-fails": (lambda t: ["verify", blob_of(CLEAN, t), CLEAN], 2, [VERIFY, FAILED]),
    "verify-ollama-all": (lambda t: ["verify", "ollama:*", "--store", ollama_everything(t / "o").root], 1,
                          [VERIFY, VERIFY, VERIFY]),
    "verify-hf-local": (lambda t: ["verify", f"hf-local:{hf_local_dir(t / 'dl').root}"], 1, [VERIFY]),
    "verify-lmstudio": (lambda t: ["verify", "lmstudio:", "--store", lmstudio_models(t / "lm")["good"].parents[2]],
                        1, [VERIFY]),
    "verify-gpt4all": (lambda t: ["verify", "gpt4all:", "--store", gpt4all_folder(t / "g")["good"].parent], 1,
                       [VERIFY]),
    "verify-sha256": (lambda t: ["verify", "--sha256", hashlib.sha256(CLEAN.read_bytes()).hexdigest(), CLEAN], 0,
                      [VERIFY]),
    "verify-sums-ignore-missing": (lambda t: ["verify", "--sums", sums_file(t), "--ignore-missing"], 1, [VERIFY]),
    "rows-clean": (lambda t: ["rows", PLE, "--ids", "1-40", "--random", "5", "--seed", "3", "--cache-rows", "8",
                              "--prefetch", "--modes", "buffered,mmap,direct"], 0, [ROWS]),
    "rows-sweep": (lambda t: ["rows", PLE, "--all", "--modes", "buffered"], 0, [ROWS]),
    "rows-misplaced-capture": (lambda t: ["rows", PLE, "--against", misplaced_capture(t), "--modes", "mmap"],
                               1, [ROWS]),
    "rows-nonfinite": (lambda t: ["rows", NAN, "--tensor", "types.f32.weight", "--all", "--modes", "buffered"],
                       1, [ROWS]),
    "rows-fails": (lambda t: ["rows", PLE, "--tensor", "no.such.weight", "--ids", "1"], 2, [FAILED]),
    "diff-same": (lambda t: ["diff", CLEAN, CLEAN], 0, [DIFF]),
    "diff-data": (lambda t: ["diff", CLEAN, INF], 1, [DIFF]),
    "diff-metadata-and-tensors": (lambda t: ["diff", CLEAN, PLE], 1, [DIFF]),
    "diff-fails": (lambda t: ["diff", CLEAN, t / "missing.gguf"], 2, [FAILED]),
    "info": (lambda t: ["info", CLEAN], 0, [INFO]),
    "info-several": (lambda t: ["info", SPLIT, PLE, "ollama:tiny", "--store", store(t)], 0, [INFO, INFO, INFO, INFO]),
    "info-one-fails": (lambda t: ["info", CLEAN, t / "missing.gguf"], 2, [INFO, FAILED]),
    "manifest": (lambda t: ["manifest", SPLIT, "-o", t / "m.json"], 0, [MANIFEST]),
    "manifest-stdout": (lambda t: ["manifest", PLE, "-o", "-"], 0, [MANIFEST]),
    "manifest-fails": (lambda t: ["manifest", CLEAN, "-o", CLEAN, "--force"], 2, [FAILED]),
    "manifest-llama-hash": (lambda t: ["manifest", SPLIT, "-o", "-", "--manifest-format", LLAMA, "--hash", "all"], 0,
                            [LLAMA]),
    "check-ollama": (lambda t: ["check", "ollama:tiny", "--store", store(t)], 0, [CHECK]),
    "check-unverified-and-nonfinite": (lambda t: ["check", CLEAN, NAN], 1, [CHECK, CHECK]),
    "check-damaged-against-manifest": (lambda t: ["check", *damaged_against_manifest(t)], 1, [CHECK]),
    "check-fails": (lambda t: ["check", t / "missing.gguf"], 2, [FAILED]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_json_output_validates_against_the_shipped_schema(case: str, tmp_path: Path) -> None:
    args, exit_status, kinds = CASES[case]
    result = run_cli([*args(tmp_path), "--json"])
    assert result.exit_code == exit_status, (result.stdout, result.stderr, result.exception)
    doc = json.loads(result.stdout)
    assert errors(doc) == []
    assert doc["status"] == STATUS_OF_EXIT[exit_status]
    assert [kind(m) for m in doc["models"]] == kinds
    for element in doc["models"]:
        if kind(element) not in (FAILED, MANIFEST, LLAMA):
            assert list(element)[:3] == ["schema", "tool_version", "ok"]
            assert element["tool_version"] == ggaudit.__version__
    # Each failed target is also its one line on stderr, as without --json.
    failures = [m["error"]["message"] for m in doc["models"] if "error" in m]
    assert [line for line in result.stderr.splitlines() if line.startswith("ggaudit: error: ")] == [
        f"ggaudit: error: {message}" for message in failures]


def test_the_cases_reach_every_kind_of_element_and_of_finding() -> None:
    kinds = {k for _, _, ks in CASES.values() for k in ks}
    assert kinds == {SCAN, CHECK, VERIFY, ROWS, DIFF, INFO, MANIFEST, LLAMA, FAILED}
    assert len(SCHEMA["$defs"]["element"]["oneOf"]) == len(kinds)


def test_format_json_is_the_json_flag(tmp_path: Path) -> None:
    flag, option = run_cli(["info", CLEAN, "--json"]), run_cli(["info", CLEAN, "--format", "json"])
    assert (flag.exit_code, option.exit_code) == (0, 0) and flag.stdout == option.stdout
    assert run_cli(["info", CLEAN, "--json", "--format", "text"]).stdout == flag.stdout     # --json wins
    assert run_cli(["info", CLEAN, "--format", "text"]).stdout == run_cli(["info", CLEAN]).stdout


# --- the schema refuses what is wrong -------------------------------------------------------------------

@pytest.fixture(scope="module")
def findings_doc() -> dict[str, Any]:
    """A valid document of two targets: a scan with findings and a failed one."""
    doc = json.loads(run_cli(["scan", NAN, FIXTURES / "missing.gguf", "--json"]).stdout)
    assert errors(doc) == [] and doc["status"] == "error"
    return doc


def _without(d: dict[str, Any], key: str) -> None:
    del d[key]


def _first_finding(d: dict[str, Any]) -> dict[str, Any]:
    return next(t for t in d["models"][0]["tensors"] if t["findings"])["findings"][0]  # type: ignore[no-any-return]


BREAKS: dict[str, Callable[[dict[str, Any]], None]] = {
    "no ok in a report": lambda d: _without(d["models"][0], "ok"),
    "a key the schema does not know": lambda d: d["models"][0].update(extra=1),
    "another schema id": lambda d: d.update(schema="ggaudit/cli-output/2"),
    "a report of an unknown schema": lambda d: d["models"][0].update(schema="ggaudit/scan-report/2"),
    "an error hidden behind findings": lambda d: d.update(status="findings"),
    "clean with a failed target": lambda d: d.update(status="clean"),
    "a finding of an unknown kind": lambda d: _first_finding(d).update(kind="weird"),
    "a negative offset": lambda d: d["models"][1]["error"].update(offset=-1),
    "a count as text": lambda d: d["models"][0]["counts"].update(nan="1"),
    "no models": lambda d: d.update(models=[]),
}


def test_structure_findings_and_expert_counts_are_checked(findings_doc: dict[str, Any]) -> None:
    structure = {"kind": "trailing", "file": "m.gguf", "offset": 4096, "length": 28, "after": "b", "before": None,
                 "first_nonzero": 4096, "head": "ff00", "expected": "the end of the file", "actual": "28 more bytes"}
    tensor = next(t for t in findings_doc["models"][0]["tensors"] if t["findings"])
    good = copy.deepcopy(findings_doc)
    good["models"][0]["structure"].append(structure)
    good_tensor = next(t for t in good["models"][0]["tensors"] if t["name"] == tensor["name"])
    good_tensor.update(n_experts=8, experts=[{"expert": 5, "counts": tensor["counts"]}])
    good_tensor["findings"][0]["expert"] = 5
    assert errors(good) == []
    for damage in ({"kind": "weird"}, {"length": 0}, {"head": "xyz"}, {"offset": None}):
        bad = copy.deepcopy(findings_doc)
        bad["models"][0]["structure"].append({**structure, **damage})
        assert errors(bad) != [], damage
    bad = copy.deepcopy(good)
    next(t for t in bad["models"][0]["tensors"] if t["name"] == tensor["name"])["experts"][0]["expert"] = -1
    assert errors(bad) != []


@pytest.mark.parametrize("damage", sorted(BREAKS))
def test_a_broken_document_fails_validation(findings_doc: dict[str, Any], damage: str) -> None:
    doc = copy.deepcopy(findings_doc)
    BREAKS[damage](doc)
    assert errors(doc) != [], damage


def test_the_schema_is_draft_2020_12_and_ships_with_the_package() -> None:
    Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert SCHEMA["properties"]["schema"] == {"const": "ggaudit/cli-output/1"}


def test_rows_that_compared_nothing_is_a_failed_target(monkeypatch: pytest.MonkeyPatch) -> None:
    from ggaudit.rows import replay
    from ggaudit.evidence.readers import DirectIOUnavailable

    def no_direct(path: str, mode: str) -> Any:
        raise DirectIOUnavailable(path, "no direct I/O here")

    monkeypatch.setattr(replay, "open_reader", no_direct)
    text = run_cli(["rows", PLE, "--ids", "1", "--modes", "direct"])
    line = f"ggaudit: error: {PLE}: nothing was compared: every read path was skipped (direct: skipped: {PLE}: " \
           "no direct I/O here)"
    assert (text.exit_code, text.stdout, text.stderr) == (2, "", line + "\n")
    doc = json.loads(run_cli(["rows", PLE, "--ids", "1", "--modes", "direct", "--json"]).stdout)
    assert errors(doc) == [] and doc["status"] == "error"
    assert doc["models"] == [{"target": str(PLE), "error": {
        "message": line.removeprefix("ggaudit: error: "), "path": str(PLE), "offset": None, "field": None,
        "kind": "NothingChecked"}}]


def test_the_shipped_schema_is_what_the_report_records_give() -> None:
    """The $defs of the records that describe themselves (ggaudit.json_shape) are derived, not written:
    a field added to such a record and not to the shipped schema fails here (scripts/derive_schema.py)."""
    derive = load_script("derive_schema")
    assert derive.derived(SCHEMA) == SCHEMA
    assert set(derive.schema_defs(derive.ROOTS)) == {
        "scan_report", "tensor_scan", "finding", "expert_counts", "scale_histogram", "structure_finding",
        "metadata_finding", "template_finding", "verify_report", "checked", "verify_mismatch", "diff_report",
        "metadata_change", "layout_change", "data_diff", "value_change", "structure_diff", "region_change",
        "row_mismatch", "nonfinite_value", "row_choice", "header_checks"}


def test_a_described_record_writes_each_field_as_its_schema_says() -> None:
    """One description, two outputs: the JSON of a Checked from the cache validates against the derived
    schema of checked; with the cache time dropped it is refused (its oneOf), as a key the record lacks is."""
    from ggaudit.json_shape import schema_of
    from ggaudit.verify.report import CACHE, Checked

    found = Checked(path="m.gguf", subject="m", algorithm="sha256", digest="ab" * 32, size=7, ok=True,
                    source=CACHE, cached_at="2026-12-03T18:00:00Z")
    validator = Draft202012Validator(schema_of(Checked))
    assert found.to_json() == {"path": "m.gguf", "subject": "m", "algorithm": "sha256", "digest": "ab" * 32,
                               "size": 7, "ok": True, "source": "cache", "cached_at": "2026-12-03T18:00:00Z"}
    assert validator.is_valid(found.to_json())
    assert not validator.is_valid({**found.to_json(), "cached_at": None})
    assert not validator.is_valid({**found.to_json(), "etag": "x"})
