"""``--format sarif``: SARIF 2.1.0 logs the official schema accepts, one result per listed finding at its exact
file offset and length, for scan, verify, rows and diff; failed targets and untrusted names. And what GitHub
code scanning needs of them: a region with a startLine, fingerprints stable across runs, a run (and category)
per target, and its upload limits kept, said when a log is cut to fit."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner
from gguf import GGMLQuantizationType as T

from ggaudit.outcomes import Outcome
from ggaudit.cli import main
from ggaudit.cli.reporters import Rendering, reporter
from ggaudit.cli.reporters import sarif as S
from ggaudit.cli.reporters.sarif import artifact_uri, rule_json
from ggaudit.format.blocks import LAYOUTS
from ggaudit.format.build import TensorSpec, write_gguf
from ggaudit.kinds import KINDS
from ggaudit.rows import replay as R
from ggaudit.evidence.readers import BufferedReader, Reader, open_reader
from ggaudit.escaping import escape
from rows_support import Wrapped, make_table
from scan_support import finite_tensor, poke
from support import write_small_model

SCHEMA = json.loads((Path(__file__).parent / "data" / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))
F32, Q8_0 = LAYOUTS[T.F32], LAYOUTS[T.Q8_0]
NAN_F32, NEG_INF_F16 = 0x7FC00000, 0xFC00


def valid_sarif(text: str) -> dict[str, Any]:
    """The log, after the official SARIF 2.1.0 schema (draft-04) accepted it, and every region of it carries
    the startLine GitHub code scanning requires (line 1: a GGUF is a binary file)."""
    log = json.loads(text)
    jsonschema.Draft4Validator(SCHEMA).validate(log)
    places = [place for run in log["runs"] for result in run["results"]
              for place in [*result["locations"], *result.get("relatedLocations", [])]]
    assert [p["physicalLocation"]["region"]["startLine"] for p in places] == [1] * len(places)
    return log


def two_findings_model(path: Path, first: str = "a.weight", second: str = "b.weight") -> dict[str, int]:
    """A NaN in ``first`` (F32 [8, 4]: row 2, column 3) and a -Inf block scale in ``second`` (Q8_0 [64, 2]:
    row 1, block 1), and a clean tensor; returns the tensors' offsets."""
    a = finite_tensor(T.F32, (8, 4), 1)
    poke(a, F32, 2 * 8 + 3, F32.fields[0], NAN_F32)
    b = finite_tensor(T.Q8_0, (64, 2), 2)
    poke(b, Q8_0, 1 * 2 + 1, Q8_0.fields[0], NEG_INF_F16)
    return write_gguf(path, [TensorSpec(first, T.F32, (8, 4), bytes(a)),
                             TensorSpec(second, T.Q8_0, (64, 2), bytes(b)),
                             TensorSpec("clean.weight", T.F32, (8, 1), bytes(finite_tensor(T.F32, (8, 1), 3)))])


def run(*args: str | Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


def the_run(log: dict[str, Any]) -> dict[str, Any]:
    (one,) = log["runs"]
    return one


def where(result: dict[str, Any]) -> tuple[str, int, int]:
    physical = result["locations"][0]["physicalLocation"]
    return physical["artifactLocation"]["uri"], physical["region"]["byteOffset"], physical["region"]["byteLength"]


def test_scan_with_two_findings_gives_two_results_at_their_offsets(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    offsets = two_findings_model(path)
    code, out, err = run("scan", path, "--format", "sarif")
    assert (code, err) == (1, "")
    log = valid_sarif(out)
    assert (log["version"], log["$schema"]) == ("2.1.0", "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/"
                                                         "schemas/sarif-schema-2.1.0.json")
    sarif = the_run(log)
    nan, inf = sarif["results"]
    uri = path.as_uri()
    assert (nan["ruleId"], nan["level"], where(nan)) == ("nan", "error", (uri, offsets["a.weight"] + 19 * 4, 4))
    assert (inf["ruleId"], inf["level"], where(inf)) == ("-inf", "error", (uri, offsets["b.weight"] + 3 * 34, 2))
    assert {k: nan["properties"][k] for k in ("tensor", "row", "column", "block", "field", "bits", "expert")} == {
        "tensor": "a.weight", "row": 2, "column": 3, "block": 3, "field": "value", "bits": "0x7fc00000", "expert": None}
    assert {k: inf["properties"][k] for k in ("tensor", "row", "column", "block", "field", "bits", "width")} == {
        "tensor": "b.weight", "row": 1, "column": 32, "block": 1, "field": "d", "bits": "0xfc00", "width": 32}
    assert [r["locations"][0]["logicalLocations"] for r in (nan, inf)] == [
        [{"name": "a.weight", "kind": "member"}], [{"name": "b.weight", "kind": "member"}]]
    # The message is the text report's line for the finding, word for word.
    _, text, _ = run("scan", path)
    listed = [line[2:] for line in text.splitlines() if line.startswith("  ")]
    assert [r["message"]["text"] for r in (nan, inf)] == listed
    assert nan["message"]["text"].startswith(f"nan at file {path} offset {offsets['a.weight'] + 76}, length 4: ")
    driver = sarif["tool"]["driver"]
    assert (driver["name"], driver["version"]) == ("ggaudit", __import__("ggaudit").__version__)
    assert [r["id"] for r in driver["rules"]] == ["nan", "-inf"]
    assert [r["ruleIndex"] for r in (nan, inf)] == [0, 1]
    assert all(r["shortDescription"]["text"] and r["help"]["text"] for r in driver["rules"])
    assert sarif["artifacts"] == [{"location": {"uri": uri}}]
    assert sarif["invocations"] == [{"executionSuccessful": True, "exitCode": 1, "toolExecutionNotifications": []}]
    assert nan["locations"][0]["physicalLocation"]["region"] == {"startLine": 1, "byteOffset": offsets["a.weight"] + 76,
                                                                 "byteLength": 4}
    assert sarif["automationDetails"] == {"id": f"ggaudit/scan/{path}/"}
    assert [list(r["partialFingerprints"]) for r in (nan, inf)] == [["ggauditFinding/v1"]] * 2


def test_findings_past_the_limit_are_counted_in_the_run_properties(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    data = finite_tensor(T.F32, (8, 2), 1)
    for element in (1, 4, 9):
        poke(data, F32, element, F32.fields[0], NAN_F32)
    write_gguf(path, [TensorSpec("t", T.F32, (8, 2), bytes(data))])
    code, out, _ = run("scan", path, "--format", "sarif", "--limit", "1", "--sha256")
    sarif = the_run(valid_sarif(out))
    assert code == 1 and [r["properties"]["column"] for r in sarif["results"]] == [1]
    (target,) = sarif["properties"]["targets"]
    assert target["tensors"] == [{"name": "t", "counts": {"nan": 3, "+inf": 0, "-inf": 0, "outlier": 0}, "listed": 1,
                                  "not_listed": 2}]
    assert (target["not_listed"], sarif["properties"]["status"]) == (2, "findings")
    assert sarif["artifacts"][0]["length"] == path.stat().st_size     # --sha256 read the whole file


def test_structure_finding_is_a_result_at_the_trailing_bytes(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    write_gguf(path, [TensorSpec("t", T.F32, (8, 1), bytes(finite_tensor(T.F32, (8, 1), 1)))])
    end = path.stat().st_size
    with open(path, "ab") as f:
        f.write(b"PAYLOAD")
    code, out, _ = run("scan", path, "--format", "sarif")
    (result,) = the_run(valid_sarif(out))["results"]
    assert code == 1 and (result["ruleId"], result["level"], where(result)) == ("trailing", "error",
                                                                                (path.as_uri(), end, 7))
    assert result["message"]["text"].startswith(f"structure trailing at file {path} offset {end}, length 7: ")
    assert (result["properties"]["after"], result["properties"]["head"]) == ("t", b"PAYLOAD".hex())


def test_verify_against_a_manifest_locates_the_damaged_tensor(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    offsets = two_findings_model(path)
    assert run("manifest", path, "-o", tmp_path / "m.manifest")[0] == 0
    damaged = offsets["clean.weight"] + 5
    with open(path, "r+b") as f:
        f.seek(damaged)
        byte = f.read(1)[0]
        f.seek(damaged)
        f.write(bytes([byte ^ 0x40]))
    code, out, _ = run("verify", path, "--manifest", tmp_path / "m.manifest", "--format", "sarif")
    sarif = the_run(valid_sarif(out))
    whole, tensor = sarif["results"]
    size = path.stat().st_size
    assert code == 1 and (whole["ruleId"], where(whole)) == ("verify/sha256", (path.as_uri(), 0, size))
    assert (tensor["ruleId"], where(tensor)) == ("verify/tensor-data", (path.as_uri(), offsets["clean.weight"], 32))
    assert tensor["properties"]["tensor"] == "clean.weight" and tensor["properties"]["rows"] == [0, 0]
    assert tensor["locations"][0]["logicalLocations"] == [{"name": "clean.weight", "kind": "member"}]
    assert tensor["message"]["text"].startswith(f"MISMATCH tensor-data: file {path}, offset {offsets['clean.weight']}, "
                                                "length 32; tensor clean.weight, rows 0-0: ")
    assert tensor["message"]["text"].split("\n")[1].startswith("  expected: ")
    assert [r["id"] for r in sarif["tool"]["driver"]["rules"]] == ["verify/sha256", "verify/tensor-data"]
    assert sarif["artifacts"] == [{"location": {"uri": path.as_uri()}, "length": size}]


def test_verify_limit_lists_the_first_mismatches_and_counts_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    offsets = two_findings_model(path)
    assert run("manifest", path, "-o", tmp_path / "m.manifest")[0] == 0
    with open(path, "r+b") as f:
        f.seek(offsets["clean.weight"])
        f.write(b"\xff" * 4)
    (outcome,) = _verify_outcomes(path, tmp_path / "m.manifest")
    sarif = the_run(valid_sarif(reporter("sarif")([outcome], Rendering(fmt="sarif", limit=1))))
    assert [r["ruleId"] for r in sarif["results"]] == ["verify/sha256"]
    assert {k: sarif["properties"]["targets"][0][k] for k in ("mismatches", "listed", "not_listed")} == {
        "mismatches": 2, "listed": 1, "not_listed": 1}


def _verify_outcomes(path: Path, manifest: Path) -> list[Outcome[Any]]:
    from ggaudit.verify.walk.manifest import verify_manifest
    return [Outcome(str(path), result=verify_manifest(path, manifest))]


class _Shifted(Wrapped):
    """A buffered reader that reads one row (``shift`` bytes) further on than asked: a misplaced row."""

    def __init__(self, inner: Reader, shift: int) -> None:
        super().__init__(inner)
        self.shift = shift
        self.shifted = BufferedReader(inner.path)

    def read_into(self, view: memoryview, offset: int) -> int:
        self.shifted.read_into(view, offset + self.shift)
        return len(view)

    def close(self) -> None:
        self.shifted.close()
        super().close()


def test_rows_mismatches_are_results_at_the_row(tmp_path: Path) -> None:
    table = make_table(tmp_path, T.IQ4_NL, ne0=160, n_rows=64)
    rb = table.tensor.row_bytes

    def shifted(path: str, mode: str) -> Reader:
        return _Shifted(open_reader(path, mode), rb)

    report = R.check_rows(table.path, [3, 10], modes=["buffered"], options=R.RowsOptions(reader_factory=shifted))
    sarif = the_run(valid_sarif(reporter("sarif")([Outcome(table.path, result=report)], Rendering(fmt="sarif"))))
    uri = Path(table.path).as_uri()
    found = [(r["ruleId"], where(r), r["properties"]["row"], r["properties"]["other_row"]) for r in sarif["results"]]
    assert found == [("rows/misplaced", (uri, table.offset(3), rb), 3, 4),
                     ("rows/misplaced", (uri, table.offset(10), rb), 10, 11)]
    assert sarif["results"][0]["message"]["text"].startswith("mismatch: buffered row 3 [misplaced (row 4)] (gather)\n")
    assert sarif["properties"]["targets"][0]["mismatches"] == 2


def test_rows_nonfinite_values_in_the_file_are_a_result(tmp_path: Path) -> None:
    table = make_table(tmp_path, T.IQ4_NL, ne0=32, n_rows=16)     # one 18-byte block per row
    with open(table.path, "r+b") as f:
        f.seek(table.offset(5))
        f.write(b"\x00\x7e")                                      # row 5's d = NaN
    code, out, _ = run("rows", table.path, "--ids", "4,5", "--modes", "buffered", "--format", "sarif")
    (result,) = the_run(valid_sarif(out))["results"]
    assert code == 1 and (result["ruleId"], where(result)) == ("rows/nonfinite", (Path(table.path).as_uri(),
                                                                                 table.offset(5), 18))
    assert result["properties"]["first"]["row"] == 5 and result["properties"]["nonfinite_rows"] == 1
    assert result["message"]["text"].startswith("1 selected row holds non-finite values (first: row 5, ")


def test_diff_gives_a_result_per_difference(tmp_path: Path) -> None:
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    same = bytes(finite_tensor(T.F32, (8, 2), 1))
    changed = bytearray(same)
    changed[8 * 4 + 5] ^= 0x01                                     # row 1, column 5
    offsets_a = write_gguf(a, [TensorSpec("same", T.F32, (8, 2), same), TensorSpec("data", T.F32, (8, 2), same),
                               TensorSpec("gone", T.F32, (8, 1), same[:32]), TensorSpec("shape", T.F32, (8, 2), same)],
                           {"general.name": "a"})
    offsets_b = write_gguf(b, [TensorSpec("same", T.F32, (8, 2), same),
                               TensorSpec("data", T.F32, (8, 2), bytes(changed)),
                               TensorSpec("shape", T.F32, (16, 1), same), TensorSpec("new", T.F32, (8, 1), same[:32])],
                           {"general.name": "b"})
    code, out, _ = run("diff", a, b, "--format", "sarif")
    sarif = the_run(valid_sarif(out))
    assert code == 1
    assert [r["ruleId"] for r in sarif["results"]] == ["diff/metadata", "diff/only-in-a", "diff/only-in-b",
                                                       "diff/layout", "diff/data"]
    metadata, gone, new, shape, data = sarif["results"]
    # Each message is the text report's lines for that difference.
    _, text, _ = run("diff", a, b)
    assert "\n".join(r["message"]["text"] for r in sarif["results"]) == "\n".join(text.splitlines()[2:-1])
    assert metadata["message"]["text"].startswith("CHANGED metadata general.name: ")
    assert (gone["properties"]["tensor"], new["properties"]["tensor"]) == ("gone", "new")
    assert (shape["properties"]["tensor"], shape["properties"]["shape_b"]) == ("shape", [16, 1])
    assert where(data) == (b.as_uri(), offsets_b["data"] + 8 * 4 + 4, 4)
    related = data["relatedLocations"][0]["physicalLocation"]
    assert (related["artifactLocation"]["uri"], related["region"]) == (
        a.as_uri(), {"startLine": 1, "byteOffset": offsets_a["data"] + 8 * 4 + 4, "byteLength": 4})
    assert (data["properties"]["first"]["row"], data["properties"]["first"]["column"]) == (1, 1)
    assert data["message"]["text"].startswith("DIFFER tensor data (F32 [8, 2]): 1 of 2 rows ")


def test_a_failed_target_is_an_error_notification_and_the_others_still_report(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    two_findings_model(path)
    missing = tmp_path / "missing.gguf"
    code, out, err = run("scan", missing, path, "--format", "sarif")
    failed, read = valid_sarif(out)["runs"]
    assert code == 2 and err.startswith("ggaudit: error: ")
    assert [r["automationDetails"]["id"] for r in (failed, read)] == [f"ggaudit/scan/{missing}/",
                                                                        f"ggaudit/scan/{path}/"]
    (invocation,) = failed["invocations"]
    (note,) = invocation["toolExecutionNotifications"]
    assert (invocation["executionSuccessful"], invocation["exitCode"], note["level"]) == (False, 2, "error")
    assert note["message"]["text"] == err.removeprefix("ggaudit: error: ").rstrip("\n")
    assert (note["properties"]["target"], note["properties"]["kind"]) == (str(missing), "ReadError")
    assert (failed["results"], failed["properties"]["status"]) == ([], "error")
    assert failed["properties"]["targets"][0]["error"]["kind"] == "ReadError"
    # The other target's run: its two results, and the run's own status; the exit code is the process's.
    assert (len(read["results"]), read["properties"]["status"]) == (2, "findings")
    assert read["invocations"] == [{"executionSuccessful": True, "exitCode": 2, "toolExecutionNotifications": []}]


def test_untrusted_names_are_escaped_in_messages_and_exact_in_properties(tmp_path: Path) -> None:
    folder = tmp_path / "d\u00e9j\u00e0 vu #1"
    folder.mkdir()
    path = folder / "m.gguf"
    hostile = "evil\x1b[2J\u202e\\\n\"</>.weight"
    two_findings_model(path, first=hostile)
    code, out, _ = run("scan", path, "--format", "sarif")
    assert code == 1 and out.isascii() and "\x1b" not in out
    nan = the_run(valid_sarif(out))["results"][0]
    assert nan["properties"]["tensor"] == hostile
    text = nan["message"]["text"]
    assert f"tensor {escape(hostile)}, row 2" in text and "evil\\x1b[2J\\u202e\\\\\\n\"</>.weight" in text
    assert not any(ch in text for ch in "\x1b\u202e\n")
    assert nan["locations"][0]["logicalLocations"][0]["name"] == escape(hostile)
    assert where(nan)[0].endswith("/d%C3%A9j%C3%A0%20vu%20%231/m.gguf")


def test_warnings_are_warning_notifications(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    write_gguf(path, [TensorSpec("q8k", T.Q8_K, (256, 1), bytes(finite_tensor(T.Q8_K, (256, 1), 3)))])
    code, out, _ = run("scan", path, "--deep", "--format", "sarif")
    (invocation,) = the_run(valid_sarif(out))["invocations"]
    assert code == 0 and invocation["executionSuccessful"] is True
    assert [(n["level"], n["message"]["text"]) for n in invocation["toolExecutionNotifications"]] == [
        ("warning", "deep: gguf.quants cannot decode Q8_K; 1 tensor of that type checked by block fields only")]


def test_info_and_a_report_file(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    two_findings_model(path)
    code, out, _ = run("info", path, "--format", "sarif", "-o", tmp_path / "info.sarif")
    sarif = the_run(valid_sarif((tmp_path / "info.sarif").read_text(encoding="utf-8")))
    assert (code, out, sarif["results"]) == (0, "", [])
    assert sarif["artifacts"] == [{"location": {"uri": path.as_uri()}, "length": path.stat().st_size}]


@pytest.mark.parametrize("flavour,path,uri", [
    (PurePosixPath, "/models/a b/m.gguf", "file:///models/a%20b/m.gguf"),
    (PurePosixPath, "models/m#1?.gguf", "models/m%231%3F.gguf"),
    (PurePosixPath, "c:odd/m.gguf", "c%3Aodd/m.gguf"),           # not a scheme
    (PurePosixPath, "evil\x1b\u202e.gguf", "evil%1B%E2%80%AE.gguf"),
    (PurePosixPath, "raw\udcff.gguf", "raw%FF.gguf"),             # an undecodable byte, as it was
    (PureWindowsPath, "C:\\Models\\m 1.gguf", "file:///C:/Models/m%201.gguf"),
    (PureWindowsPath, "models\\m.gguf", "models/m.gguf"),
    (PureWindowsPath, "\\\\server\\share\\m.gguf", "file://server/share/m.gguf"),
])
def test_artifact_uris(flavour: type, path: str, uri: str) -> None:
    if "\udcff" in path and os.name == "nt":
        pytest.skip("Windows names are UTF-16: no undecodable bytes")
    assert artifact_uri(path, flavour) == uri


def test_every_rule_says_what_to_do() -> None:
    for kind in KINDS.values():
        rule = rule_json(kind)
        assert rule["defaultConfiguration"]["level"] in ("error", "warning", "note"), rule
        assert rule["shortDescription"]["text"] and len(rule["help"]["text"]) > 40, rule


# --- GitHub code scanning: fingerprints, a run per target, the upload limits ----------------------------------

def _fingerprints(out: str) -> list[str]:
    return [r["partialFingerprints"]["ggauditFinding/v1"] for r in the_run(valid_sarif(out))["results"]]


def test_fingerprints_are_the_same_for_the_same_finding_in_another_folder_and_differ_between_findings(
        tmp_path: Path) -> None:
    first, second, moved = tmp_path / "run-1" / "m.gguf", tmp_path / "run-2" / "m.gguf", tmp_path / "run-3" / "m.gguf"
    for path in (first, second, moved):
        path.parent.mkdir()
    offsets = two_findings_model(first)
    two_findings_model(second)
    two_findings_model(moved, first="c.weight")          # the NaN in another tensor
    once, again, elsewhere = (_fingerprints(run("scan", p, "--format", "sarif")[1]) for p in (first, second, moved))
    assert once == again and len(set(once)) == 2
    assert elsewhere[0] != once[0] and elsewhere[1] == once[1]
    # Derived from the kind, the file's name and the finding's place, nothing else (a count tells alike ones apart).
    key = ["nan", ["m.gguf", offsets["a.weight"] + 76, 4, "a.weight", 2, 3, None, "value", None], []]
    assert once[0] == hashlib.sha256(json.dumps(key).encode()).hexdigest() + ":1"


def test_each_target_is_a_run_of_its_own_and_the_targets_past_twenty_share_the_last(tmp_path: Path) -> None:
    models = [write_small_model(tmp_path / f"m{i:02}.gguf") for i in range(21)]
    code, out, err = run("scan", *models, "--format", "sarif")
    runs = valid_sarif(out)["runs"]
    assert code == 0 and len(runs) == 20
    assert [r["automationDetails"]["id"] for r in runs] == [
        *(f"ggaudit/scan/{m}/" for m in models[:19]), "ggaudit/scan/more-targets/"]
    assert [t["target"] for t in runs[-1]["properties"]["targets"]] == [str(m) for m in models[19:]]
    said = "2 targets share this run: code scanning takes at most 20 runs a file"
    assert [(n["level"], n["message"]["text"]) for n in runs[-1]["invocations"][0]["toolExecutionNotifications"]] == [
        ("warning", said)]
    assert err == f"ggaudit: warning: SARIF run ggaudit/scan/more-targets/: {said}\n"


def _nan_model(path: Path, nans: int) -> Path:
    """An F32 [8, 4] tensor whose first ``nans`` elements are NaN: that many findings, columns 0.. of row 0 on."""
    data = finite_tensor(T.F32, (8, 4), 1)
    for element in range(nans):
        poke(data, F32, element, F32.fields[0], NAN_F32)
    write_gguf(path, [TensorSpec("t", T.F32, (8, 4), bytes(data))])
    return path


def test_results_past_code_scannings_limit_per_run_are_cut_and_said(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(S, "MAX_RESULTS", 20)            # 25,000 in use: the same code, with a smaller model
    path = _nan_model(tmp_path / "m.gguf", 32)
    code, out, err = run("scan", path, "--format", "sarif", "--limit", "32")
    sarif = the_run(valid_sarif(out))
    assert code == 1 and [(r["properties"]["row"], r["properties"]["column"]) for r in sarif["results"]] == [
        (element // 8, element % 8) for element in range(20)]
    why = "code scanning takes at most 20 results a run"
    assert sarif["properties"]["cut"] == [{"why": why, "listed": 20, "not_listed": 12}]
    said = f"12 of 32 results not listed ({why}): counted in run.properties.cut"
    assert [(n["level"], n["message"]["text"]) for n in sarif["invocations"][0]["toolExecutionNotifications"]] == [
        ("warning", said)]
    assert err == f"ggaudit: warning: SARIF run ggaudit/scan/{path}/: {said}\n"


def test_a_log_over_the_upload_size_once_compressed_is_cut_to_fit_and_said(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    path = _nan_model(tmp_path / "m.gguf", 32)
    whole = len(gzip.compress(run("scan", path, "--format", "sarif", "--limit", "32")[1].encode(), 6))
    monkeypatch.setattr(S, "MAX_GZIP_BYTES", whole - 1)  # 10 MB in use: one byte less than this log needs
    code, out, err = run("scan", path, "--format", "sarif", "--limit", "32")
    sarif = the_run(valid_sarif(out))
    assert code == 1 and len(gzip.compress(out.encode(), 6)) <= whole - 1
    why = f"code scanning takes at most {whole - 1} bytes a file, gzip-compressed"
    assert (len(sarif["results"]), sarif["properties"]["cut"]) == (16, [{"why": why, "listed": 16, "not_listed": 16}])
    assert err == f"ggaudit: warning: SARIF run ggaudit/scan/{path}/: 16 of 32 results not listed ({why}): " \
                  "counted in run.properties.cut\n"


def test_related_locations_past_code_scannings_limit_are_cut_and_said(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(S, "MAX_LOCATIONS", 1)           # 1,000 in use; a diff result has one related location
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    same = bytes(finite_tensor(T.F32, (8, 2), 1))
    changed = bytearray(same)
    changed[5] ^= 0x01
    write_gguf(a, [TensorSpec("data", T.F32, (8, 2), same)])
    write_gguf(b, [TensorSpec("data", T.F32, (8, 2), bytes(changed))])
    code, out, err = run("diff", a, b, "--format", "sarif")
    (result,) = the_run(valid_sarif(out))["results"]
    assert code == 1 and "relatedLocations" not in result and result["properties"]["related_not_listed"] == 1
    assert err == (f"ggaudit: warning: SARIF run ggaudit/diff/{a}/: 1 of 1 related locations of a diff/data result "
                   "not listed (code scanning takes at most 1 locations a result)\n")


def test_the_limits_are_the_ones_code_scanning_documents() -> None:
    """docs.github.com, "SARIF support for code scanning": runs per file, results per run, locations per
    result; "SARIF results file is too large": 10 MB gzip-compressed."""
    assert (S.MAX_RUNS, S.MAX_RESULTS, S.MAX_LOCATIONS, S.MAX_GZIP_BYTES) == (20, 25_000, 1_000, 10_000_000)


def test_a_targets_category_is_escaped_as_on_a_terminal_and_exact_in_the_properties(tmp_path: Path) -> None:
    path = tmp_path / "evil\u202e.gguf"          # a right-to-left override: a name that reads otherwise
    two_findings_model(path)
    code, out, _ = run("scan", path, "--format", "sarif")
    sarif = the_run(valid_sarif(out))
    shown = str(path).replace("\u202e", "\\u202e")
    assert code == 1 and sarif["automationDetails"]["id"] == f"ggaudit/scan/{shown}/" and "\u202e" not in shown
    assert sarif["properties"]["targets"][0]["target"] == str(path)
