"""``check`` drops no expectation (issue 32, item 1), on real store layouts in a temporary folder: every
source in play is compared at once and listed with its result; two that disagree are a finding; what the
store says is wrong is said as verify says it, with verify's exit status; a manifest that leaves a file of
the target out, names nothing of it, or describes a copy with a renamed tensor is what verify says of it.
Each case was "unverified" or ignored, exit 0, before."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import ggaudit
from ggaudit.check.report import CheckReport
from ggaudit.errors import NothingChecked
from ggaudit.format.blocks import GGMLQuantizationType as T
from ggaudit.format.build import TensorSpec, gguf_bytes
from ggaudit.verify.manifests.tensor import build_tensor_manifest, write_tensor_manifest
from ollama_support import ollama_store
from platforms import needs_symlinks
from stores_support import flip, gguf, hf_local_dir, sha256

COMMIT = "0123456789abcdef0123456789abcdef01234567"
PAGE_CACHE = ("buffered", "mmap")       # the decision, not the device, is under test: no direct pass needed


def codes(report: CheckReport) -> list[str]:
    return [c.code for c in report.conclusions]


def results(report: CheckReport, index: int = 0) -> list[tuple[str, str]]:
    f = report.files[index]
    return [(e.what, f.result(e)) for e in f.expectations]


def test_ollama_with_sums_not_listing_the_blob_still_compares_the_stores_digest(tmp_path: Path) -> None:
    model = gguf(1)
    blob, _ = ollama_store(tmp_path / "models", model, gguf(2))
    sums = tmp_path / "SHA256SUMS"
    sums.write_text(f"{'0' * 64}  other.gguf\n")
    flip(blob, len(model) - 1)
    report = ggaudit.check("ollama:tiny", store=tmp_path / "models", sums=sums, modes=PAGE_CACHE)
    assert (report.verdict, report.ok, report.reference) == ("damaged", False, "published")
    assert results(report) == [
        ("the Ollama manifest's digest of its application/vnd.ollama.image.model layer", "differs"),
        ("the sha256 its file name gives (a content-addressed blob)", "differs")]


def test_a_file_listed_twice_with_two_digests_is_a_conflict_not_last_one_wins(tmp_path: Path) -> None:
    model = tmp_path / "model.gguf"
    model.write_bytes(gguf(3))
    sums = tmp_path / "SHA256SUMS"
    sums.write_text(f"{sha256(model.read_bytes())}  model.gguf\n{'0' * 64}  model.gguf\n")
    report = ggaudit.check(model, sums=sums, modes=PAGE_CACHE)
    assert (report.verdict, report.ok) == ("damaged", False)
    assert codes(report) == ["matches-published", "read-paths-agree", "device-not-read", "expectations-conflict",
                             "differs-from-published"]
    assert results(report) == [("the checksum file's line 1", "matched"), ("the checksum file's line 2", "differs")]
    assert report.conclusions[3].evidence["sources"] == ["the checksum file's line 1", "the checksum file's line 2"]
    # The same file in the other order: still both compared, still the same verdict.
    sums.write_text(f"{'0' * 64}  model.gguf\n{sha256(model.read_bytes())}  model.gguf\n")
    assert ggaudit.check(model, sums=sums, modes=PAGE_CACHE).verdict == "damaged"


def test_an_hf_local_file_modified_after_its_download_keeps_its_etag(tmp_path: Path) -> None:
    local = hf_local_dir(tmp_path / "dl")
    data = local.good.read_bytes()
    flip(local.good, len(data) - 1)         # changed after the download, and its mtime says so
    report = ggaudit.check(f"hf-local:{local.root}", modes=PAGE_CACHE)
    assert (report.verdict, report.ok) == ("damaged", False)
    [differs] = [c for c in report.conclusions if c.code == "differs-from-published"]
    assert (differs.evidence["expected"], differs.evidence["note"]) == (
        sha256(data), "modified after it was downloaded (mtime later than its download metadata)")
    assert ggaudit.verify(f"hf-local:{local.root}").ok is False         # verify says the same


@needs_symlinks
def test_an_hf_snapshot_link_to_a_blob_whose_name_is_no_digest_is_a_store_problem(tmp_path: Path) -> None:
    repo = tmp_path / "hub" / "models--org--tiny"
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT + "\n")
    data = gguf(4)
    (repo / "blobs" / f"{sha256(data)}.incomplete").write_bytes(data)
    (repo / "snapshots" / COMMIT).mkdir(parents=True)
    (repo / "snapshots" / COMMIT / "tiny.gguf").symlink_to(f"../../blobs/{sha256(data)}.incomplete")
    report = ggaudit.check("hf:org/tiny", hf_cache=tmp_path / "hub", modes=PAGE_CACHE)
    assert (report.verdict, report.ok) == ("unverified", False)
    [problem] = [c for c in report.conclusions if c.code == "store-problem"]
    assert problem.evidence == {"file": report.files[0].path, "kind": "link", "subject": "tiny.gguf",
                                "detail": "blob name is not a digest"}
    assert "nothing-wrong" not in codes(report)
    assert ggaudit.verify("hf:org/tiny", hf_cache=tmp_path / "hub").ok is False


def _split_set(folder: Path) -> list[Path]:
    rng = np.random.default_rng(7)
    shards = []
    for k in range(2):
        data, _ = gguf_bytes([TensorSpec(f"blk.{k}.w", T.F32, (8, 4), rng.standard_normal(32).astype("<f4").tobytes())],
                             {"general.architecture": "llama", "split.no": k, "split.count": 2,
                              "split.tensors.count": 2})
        shards.append(folder / f"m-{k + 1:05d}-of-00002.gguf")
        shards[-1].write_bytes(data)
    return shards


def test_a_manifest_leaving_a_shard_out_is_file_extra_and_one_naming_nothing_is_exit_2(tmp_path: Path) -> None:
    shards = _split_set(tmp_path)
    manifest = tmp_path / "one.manifest.json"
    whole = build_tensor_manifest(shards[0])
    kept = type(whole)(**{**whole.__dict__, "files": whole.files[:1],
                          "tensors": tuple(t for t in whole.tensors if t.file == shards[0].name)})
    write_tensor_manifest(kept, manifest)
    report = ggaudit.check(shards[0], manifest=manifest, modes=PAGE_CACHE)
    assert (report.verdict, report.ok) == ("unverified", False)      # the shard left out: nothing says what it is
    assert [f.decision.verdict for f in report.files] == ["cache-verified", "unverified"]
    assert [c.evidence["file"] for c in report.conclusions if c.code == "file-extra"] == [str(shards[1])]
    other = tmp_path / "other"
    other.mkdir()
    stranger = other / "stranger.gguf"
    stranger.write_bytes(gguf(9))
    write_tensor_manifest(build_tensor_manifest(stranger), other / "stranger.manifest.json")
    with pytest.raises(NothingChecked):
        ggaudit.check(shards[0], manifest=other / "stranger.manifest.json", modes=PAGE_CACHE)


def test_a_copy_with_a_renamed_tensor_is_checked_in_its_place_and_differs(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    a, b = (rng.standard_normal(32).astype("<f4").tobytes() for _ in range(2))
    meta = {"general.architecture": "llama"}
    original, _ = gguf_bytes([TensorSpec("token_embd.weight", T.F32, (8, 4), a),
                              TensorSpec("output.weight", T.F32, (8, 4), b)], meta)
    renamed, _ = gguf_bytes([TensorSpec("token_embd.weight", T.F32, (8, 4), a),
                             TensorSpec("output.weigh7", T.F32, (8, 4), b)], meta)
    (tmp_path / "model.gguf").write_bytes(original)
    write_tensor_manifest(build_tensor_manifest(tmp_path / "model.gguf"), tmp_path / "model.manifest.json")
    copy = tmp_path / "copy.gguf"
    copy.write_bytes(renamed)
    os.remove(tmp_path / "model.gguf")
    report = ggaudit.check(copy, manifest=tmp_path / "model.manifest.json", modes=PAGE_CACHE)
    assert (report.verdict, report.reference, report.ok) == ("damaged", "manifest", False)
    assert report.files[0].manifest is not None
    assert report.files[0].manifest.what == ("the manifest's sha256 of model.gguf (checked in its place: the "
                                             "manifest describes one file, of another name)")
    assert ggaudit.verify(copy, manifest=tmp_path / "model.manifest.json").ok is False
