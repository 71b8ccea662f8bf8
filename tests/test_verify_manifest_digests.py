"""verify --manifest compares each tensor's whole-tensor digest as well as its row groups' digests: a manifest
in which only one of them differs is a tensor-data mismatch naming which, and real damage names the row group."""

from __future__ import annotations

import json
from pathlib import Path

from support import run_cli, write_small_model

ROW = 68            # write_small_model: Q8_0, 64 columns = 2 blocks of 34 bytes
EMB = "token_embd.weight"


def _manifest_cli(tmp_path: Path) -> tuple[Path, Path, dict]:
    model = write_small_model(tmp_path / "m.gguf", rows=64)
    out = tmp_path / "m.json"
    assert run_cli(["manifest", model, "-o", out, "--group-bytes", str(8 * ROW)]).exit_code == 0
    return model, out, json.loads(out.read_text())


def test_whole_tensor_digest_alone_differing_is_a_tensor_data_mismatch(tmp_path: Path) -> None:
    model, out, doc = _manifest_cli(tmp_path)
    tensor = doc["tensors"][0]
    good = tensor["xxh3_128"]
    tensor["xxh3_128"] = "0" * 32                      # the row-group digests are left as they were
    out.write_text(json.dumps(doc))
    result = run_cli(["verify", model, "--manifest", out])
    assert result.exit_code == 1, result.output
    lines = result.stdout.splitlines()
    sha, size = doc["files"][0]["sha256"], doc["files"][0]["size"]
    assert lines == [
        f"verify manifest: {model}",
        f"ok sha256 {sha}: file {model}, {size} bytes (m.gguf)",     # the file's bytes are as listed
        f"MISMATCH tensor-data: file {model}, offset {tensor['offset']}, length {64 * ROW}; tensor {EMB}, "
        "rows 0-63: xxh3-128 of the whole tensor differs (no row group's does)",
        f"  expected: {'0' * 32}",
        f"  actual:   {good}",
        f"summary: 1 file checked, 0 from the cache, {size} bytes hashed, 1 mismatch",
    ]
    as_json = json.loads(run_cli(["verify", model, "--manifest", out, "--json"]).stdout)["models"][0]
    assert [(m["kind"], m["tensor"], m["rows"], m["expected"], m["actual"]) for m in as_json["mismatches"]] == [
        ("tensor-data", EMB, [0, 63], "0" * 32, good)]


def test_row_group_digest_alone_differing_is_still_reported(tmp_path: Path) -> None:
    model, out, doc = _manifest_cli(tmp_path)
    tensor = doc["tensors"][0]
    good = tensor["row_groups"][2]
    tensor["row_groups"][2] = "f" * 32                 # the whole-tensor digest is left as it was
    out.write_text(json.dumps(doc))
    result = run_cli(["verify", model, "--manifest", out])
    assert result.exit_code == 1, result.output
    assert result.stdout.splitlines()[2:5] == [
        f"MISMATCH tensor-data: file {model}, offset {tensor['offset'] + 16 * ROW}, length {8 * ROW}; "
        f"tensor {EMB}, rows 16-23: xxh3-128 of 1 row group(s) differs",
        f"  expected: {'f' * 32}",
        f"  actual:   {good}",
    ]


def test_real_damage_still_reports_row_groups_only(tmp_path: Path) -> None:
    model, out, doc = _manifest_cli(tmp_path)
    with open(model, "r+b") as f:
        f.seek(doc["tensors"][0]["offset"] + 40 * ROW + 10)
        f.write(b"\x55")
    as_json = json.loads(run_cli(["verify", model, "--manifest", out, "--json"]).stdout)["models"][0]
    assert [(m["kind"], m["rows"], m["detail"]) for m in as_json["mismatches"]] == [
        ("sha256", None, "sha256 differs"), ("tensor-data", [40, 47], "xxh3-128 of 1 row group(s) differs")]
