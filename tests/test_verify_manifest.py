"""`manifest` and `verify --manifest`: round trip, and a flipped byte pinned to its tensor and rows."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from gguf import GGMLQuantizationType as T

from ggaudit.io import positioned
from ggaudit.format.build import TensorSpec, write_gguf
from ggaudit.cli import main
from ggaudit.format.layout import open_model
from ggaudit.verify.manifests.tensor import build_tensor_manifest, write_tensor_manifest
from ggaudit.verify.walk.tensors import verify_tensor_manifest
from test_errors import _run_unprivileged, needs_drop

# Q8_0 rows of 256 columns are 8 blocks x 34 bytes = 272 bytes; a 2 KiB group holds 7 rows.
GROUP = 2048
ROW = 272


def _specs(seed: int = 3) -> list[TensorSpec]:
    rng = np.random.default_rng(seed)
    return [
        TensorSpec("token_embd.weight", T.Q8_0, (256, 50), rng.integers(0, 256, 50 * ROW, np.uint8).tobytes()),
        TensorSpec("output_norm.weight", T.F32, (256,), rng.standard_normal(256).astype("<f4").tobytes()),
        TensorSpec("blk.0.attn_q.weight", T.F16, (64, 64), rng.standard_normal(4096).astype("<f2").tobytes()),
    ]


def _flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ 0x80]))


@pytest.fixture
def model(tmp_path: Path) -> tuple[Path, Path, dict[str, int]]:
    path = tmp_path / "m.gguf"
    offsets = write_gguf(path, _specs(), {"general.architecture": "llama"})
    manifest = tmp_path / "m.manifest.json"
    write_tensor_manifest(build_tensor_manifest(open_model(path), group_bytes=GROUP), manifest)
    return path, manifest, offsets


def test_untouched_model_verifies_clean(model: tuple[Path, Path, dict[str, int]]) -> None:
    path, manifest, _ = model
    report = verify_tensor_manifest(path, manifest)
    assert report.ok and report.mismatches == ()
    assert report.checked[0].digest == hashlib.sha256(path.read_bytes()).hexdigest()


def test_flipped_byte_is_pinned_to_tensor_and_row_range(model: tuple[Path, Path, dict[str, int]]) -> None:
    path, manifest, offsets = model
    row = 23                                        # group 3 covers rows 21..27
    _flip(path, offsets["token_embd.weight"] + row * ROW + 100)
    report = verify_tensor_manifest(path, manifest)
    assert [m.kind for m in report.mismatches] == ["sha256", "tensor-data"]
    data = report.mismatches[1]
    assert (data.tensor, data.rows) == ("token_embd.weight", (21, 27))
    assert (data.offset, data.length) == (offsets["token_embd.weight"] + 21 * ROW, 7 * ROW)
    want = json.loads(manifest.read_text())["tensors"][0]["row_groups"][3]
    assert data.expected == want and data.actual != want


def test_adjacent_damaged_groups_merge_into_one_run_and_last_group_is_short(
        model: tuple[Path, Path, dict[str, int]]) -> None:
    path, manifest, offsets = model
    base = offsets["token_embd.weight"]
    for row in (14, 20, 49):                        # groups 2, 2, 7 (rows 49..49, the short last group)
        _flip(path, base + row * ROW)
    _flip(path, base + 27 * ROW + 5)                # group 3
    runs = [(m.rows, m.detail) for m in verify_tensor_manifest(path, manifest).mismatches if m.kind == "tensor-data"]
    assert runs == [((14, 27), "xxh3-128 of 2 row group(s) differs"),
                    ((49, 49), "xxh3-128 of 1 row group(s) differs")]


def test_cli_manifest_then_verify_exit_codes_and_lines(tmp_path: Path,
                                                       model: tuple[Path, Path, dict[str, int]]) -> None:
    path, _, offsets = model
    runner = CliRunner()
    out = tmp_path / "cli.json"
    written = runner.invoke(main, ["manifest", str(path), "-o", str(out), "--group-bytes", str(GROUP)])
    assert written.exit_code == 0, written.output
    assert written.output.splitlines()[0] == f"wrote {out}: 1 file, 3 tensors, 13 row groups"
    assert runner.invoke(main, ["verify", str(path), "--manifest", str(out)]).exit_code == 0
    q = offsets["blk.0.attn_q.weight"]
    _flip(path, q + 2 * 128 + 1)                    # row 2 of the F16 tensor (128-byte rows, 16 per group)
    bad = runner.invoke(main, ["verify", str(path), "--manifest", str(out)])
    assert bad.exit_code == 1
    lines = bad.output.splitlines()
    i = lines.index(f"MISMATCH tensor-data: file {path}, offset {q}, length 2048; tensor blk.0.attn_q.weight, "
                    "rows 0-15: xxh3-128 of 1 row group(s) differs")
    assert lines[i + 1].startswith("  expected: ") and lines[i + 2].startswith("  actual:   ")
    assert lines[i + 1][-32:] == json.loads(out.read_text())["tensors"][2]["row_groups"][0]


def test_resized_file_and_changed_tensors(tmp_path: Path, model: tuple[Path, Path, dict[str, int]]) -> None:
    path, manifest, _ = model
    specs = _specs()
    specs[1] = TensorSpec("output_norm.weight", T.F16, (256,), bytes(512))
    specs[2] = TensorSpec("blk.0.attn_k.weight", T.F16, (64, 64), specs[2].data)
    write_gguf(path, specs, {"general.architecture": "llama"})
    report = verify_tensor_manifest(path, manifest)
    by_kind = {m.kind: m for m in report.mismatches}
    assert set(by_kind) == {"size", "sha256", "tensor-layout", "tensor-missing", "tensor-extra"}
    assert (by_kind["tensor-layout"].expected, by_kind["tensor-layout"].actual) == (
        "F32 [256], 1 rows of 1024 bytes (1024 in all), 2 per row group",
        "F16 [256], 1 rows of 512 bytes (512 in all), 4 per row group")
    assert by_kind["tensor-missing"].tensor == "blk.0.attn_q.weight"
    assert by_kind["tensor-extra"].tensor == "blk.0.attn_k.weight"


def test_split_set_manifest_localises_to_the_right_shard(tmp_path: Path) -> None:
    specs = _specs()
    shards = [tmp_path / f"m-0000{k}-of-00002.gguf" for k in (1, 2)]
    offsets = {}
    for k, (shard, part) in enumerate(zip(shards, (specs[:2], specs[2:]), strict=False)):
        offsets.update(write_gguf(shard, part, {"split.no": k, "split.count": 2, "split.tensors.count": 3}))
    manifest = tmp_path / "set.json"
    write_tensor_manifest(build_tensor_manifest(open_model(shards[1]), group_bytes=GROUP), manifest)
    assert [f["name"] for f in json.loads(manifest.read_text())["files"]] == [s.name for s in shards]
    _flip(shards[1], offsets["blk.0.attn_q.weight"] + 63 * 128)
    report = verify_tensor_manifest(shards[0], manifest)
    assert [(m.kind, m.path) for m in report.mismatches] == [("sha256", str(shards[1])),
                                                             ("tensor-data", str(shards[1]))]
    assert report.mismatches[1].rows == (48, 63)


def test_renamed_single_file_is_checked_in_place_with_a_warning(tmp_path: Path,
                                                                model: tuple[Path, Path, dict[str, int]]) -> None:
    path, manifest, _ = model
    copy = tmp_path / "sha256-copy"
    copy.write_bytes(path.read_bytes())
    report = verify_tensor_manifest(copy, manifest)
    assert report.ok
    assert report.warnings == ("manifest describes m.gguf, checking sha256-copy in its place",)


def test_bad_inputs_exit_2(tmp_path: Path, model: tuple[Path, Path, dict[str, int]]) -> None:
    path, _manifest, _ = model
    runner = CliRunner()
    (tmp_path / "junk.json").write_text("[]")
    res = runner.invoke(main, ["verify", str(path), "--manifest", str(tmp_path / "junk.json")])
    assert res.exit_code == 2 and res.stderr == f"ggaudit: error: {tmp_path / 'junk.json'}: format: not a JSON object\n"
    (tmp_path / "not.gguf").write_bytes(b"NOPE" + bytes(60))
    res = runner.invoke(main, ["manifest", str(tmp_path / "not.gguf"), "-o", str(tmp_path / "x.json")])
    assert res.exit_code == 2 and "magic" in res.stderr
    assert not (tmp_path / "x.json").exists()


def test_a_manifest_type_that_names_no_ggml_type_is_refused_in_one_line(
        tmp_path: Path, model: tuple[Path, Path, dict[str, int]]) -> None:
    path, manifest, _ = model
    doc = json.loads(manifest.read_text())
    doc["tensors"][1]["type"] = "Q" * (20 << 20)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    res = CliRunner().invoke(main, ["verify", str(path), "--manifest", str(bad)])
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr == (f"ggaudit: error: {bad}: tensors[1].type: {'Q' * 40!r}... (20971520 chars) "
                          "is not a GGML type name\n")


def test_a_layout_that_differs_only_in_row_groups_says_how(model: tuple[Path, Path, dict[str, int]],
                                                           tmp_path: Path) -> None:
    path, manifest, _ = model
    doc = json.loads(manifest.read_text())
    entry = doc["tensors"][1]                        # output_norm.weight: one row, so one group either way
    assert entry["n_rows"] == 1
    entry["rows_per_group"] += 1
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(doc))
    layout = [m for m in verify_tensor_manifest(path, edited).mismatches if m.kind == "tensor-layout"]
    assert [(m.tensor, m.expected, m.actual) for m in layout] == [(
        "output_norm.weight", f"F32 [256], 1 rows of 1024 bytes (1024 in all), {entry['rows_per_group']} per row group",
        f"F32 [256], 1 rows of 1024 bytes (1024 in all), {entry['rows_per_group'] - 1} per row group")]


def test_manifest_reads_each_byte_of_the_file_exactly_once(model: tuple[Path, Path, dict[str, int]],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    path, _, _ = model
    opened = open_model(path)
    spans: list[tuple[int, int]] = []
    real = positioned.pread_into

    def counting(fd: int, view: memoryview, offset: int) -> int:
        n = real(fd, view, offset)
        spans.append((offset, n))
        return n

    monkeypatch.setattr(positioned, "pread_into", counting)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert build_tensor_manifest(opened, group_bytes=GROUP).files[0].sha256 == digest
    assert sorted(spans) == [(0, path.stat().st_size)]      # one chunk: a small file, read once


def test_missing_shard_and_damaged_header_are_findings(tmp_path: Path) -> None:
    specs = _specs()
    shards = [tmp_path / f"m-0000{k}-of-00003.gguf" for k in (1, 2, 3)]
    for k, shard in enumerate(shards):
        write_gguf(shard, specs[k:k + 1], {"split.no": k, "split.count": 3, "split.tensors.count": 3})
    manifest = tmp_path / "set.json"
    write_tensor_manifest(build_tensor_manifest(open_model(shards[0]), group_bytes=GROUP), manifest)
    shards[1].unlink()
    _flip(shards[2], 0)                             # 'GGUF' -> 'ǴGUF': the header no longer parses
    report = verify_tensor_manifest(shards[0], manifest)
    assert [(m.kind, m.path) for m in report.mismatches] == [
        ("missing", str(shards[1])), ("header", str(shards[2])), ("sha256", str(shards[2]))]
    assert report.mismatches[1].detail.startswith("no longer parses as GGUF, tensors not checked: ")
    assert "not a GGUF file (its first bytes are b'\\xc7GUF" in report.mismatches[1].detail
    assert report.checked[0].ok and not report.checked[1].ok


def test_model_not_named_in_a_multi_file_manifest_is_a_usage_error(tmp_path: Path) -> None:
    specs = _specs()
    shards = [tmp_path / f"m-0000{k}-of-00002.gguf" for k in (1, 2)]
    for k, shard in enumerate(shards):
        write_gguf(shard, specs[k:k + 1] if k == 0 else specs[1:], {"split.no": k, "split.count": 2,
                                                                    "split.tensors.count": 3})
    write_tensor_manifest(build_tensor_manifest(open_model(shards[0]), group_bytes=GROUP), tmp_path / "set.json")
    res = CliRunner().invoke(main, ["verify", str(tmp_path / "other.gguf"), "--manifest", str(tmp_path / "set.json")])
    assert res.exit_code == 2
    assert res.stderr == (f"ggaudit: error: {tmp_path / 'set.json'}: names no file of {tmp_path / 'other.gguf'} "
                          "(the manifest's files: m-00001-of-00002.gguf, m-00002-of-00002.gguf); nothing was checked\n")


def test_missing_target_is_a_missing_finding_like_a_missing_blob(tmp_path: Path,
                                                                 model: tuple[Path, Path, dict[str, int]]) -> None:
    """Exit 1, not 2: the manifest (or a blob's name) says the file should exist with this sha256, so its
    absence is a mismatch, as a missing shard, Ollama layer or checksum-file entry is (docs/verify.md)."""
    path, manifest, _ = model
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    path.unlink()
    blob = tmp_path / f"sha256-{digest}"
    runner = CliRunner()
    res = runner.invoke(main, ["verify", str(path), "--manifest", str(manifest)])
    assert (res.exit_code, res.stderr) == (1, "")
    assert res.output.splitlines() == [
        f"verify manifest: {path}",
        f"MISMATCH missing: file {path} (m.gguf): file of the manifest not found",
        f"  expected: {digest}",
        "  actual:   -",
        "summary: 0 files checked, 0 from the cache, 0 bytes hashed, 1 mismatch"]
    res = runner.invoke(main, ["verify", str(blob)])
    assert (res.exit_code, res.stderr) == (1, "")
    assert res.output.splitlines() == [
        f"verify blob: {blob}",
        f"MISMATCH missing: file {blob} (blob name): file not found",
        f"  expected: {digest}",
        "  actual:   -",
        "summary: 0 files checked, 0 from the cache, 0 bytes hashed, 1 mismatch"]


@needs_drop
def test_shard_in_a_folder_without_permission_is_unreadable_not_missing(
        tmp_path: Path, model: tuple[Path, Path, dict[str, int]]) -> None:
    path, manifest, _ = model
    locked = tmp_path / "locked"
    locked.mkdir()
    moved = path.rename(locked / path.name)
    locked.chmod(0o600)                     # listable, but nothing inside can be looked up
    try:
        proc = _run_unprivileged(["verify", moved, "--manifest", manifest])
    finally:
        locked.chmod(0o700)
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stderr
    assert proc.stderr == f"ggaudit: error: {moved}: cannot open: Permission denied\n"
