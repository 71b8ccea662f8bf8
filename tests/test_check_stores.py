"""``ggaudit check`` judged by what each store keeps (issue 25, item 1), on real store layouts: a Hugging Face
cache snapshot (the blob's name is its sha256), a ``--local-dir`` download (the etag of its metadata),
GPT4All's folder (its model list's md5), LM Studio's folder (no digest: unverified) and a checksum file;
each intact, then damaged on disk with the next step its tool documents (ggaudit/check/verdict.py cites
each command)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import ggaudit
from ggaudit.check.report import CheckReport

from platforms import needs_symlinks
from stores_support import flip, gguf, gpt4all_folder, hf_local_dir, lmstudio_models, sha256

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def matched(report: CheckReport) -> dict[str, object]:
    """The one file's matches-published evidence, but the paths (direct reads depend on the filesystem)."""
    [found] = [c for c in report.conclusions if c.code == "matches-published"]
    return {k: v for k, v in found.evidence.items() if k not in ("paths", "file")}


def differs(report: CheckReport) -> dict[str, object]:
    [found] = [c for c in report.conclusions if c.code == "differs-from-published"]
    return {k: found.evidence[k] for k in ("algorithm", "expected", "actual", "source", "note")}


def hf_snapshot(cache: Path, data: bytes) -> Path:
    """models--org--tiny at COMMIT (refs/main) holding gguf/tiny.gguf, a link to its blob: the blob."""
    repo = cache / "models--org--tiny"
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT + "\n")
    blob = repo / "blobs" / sha256(data)
    blob.write_bytes(data)
    (repo / "snapshots" / COMMIT / "gguf").mkdir(parents=True)
    (repo / "snapshots" / COMMIT / "gguf" / "tiny.gguf").symlink_to(f"../../../blobs/{sha256(data)}")
    return blob


@needs_symlinks
def test_hf_cache_snapshot_intact_then_damaged_names_the_hf_download_that_replaces_it(tmp_path: Path) -> None:
    data = gguf(3)
    blob = hf_snapshot(tmp_path / "hub", data)
    report = ggaudit.check("hf:org/tiny", hf_cache=tmp_path / "hub")
    assert (report.verdict, report.reference, report.store, report.name) == ("intact", "published", "hf", "org/tiny")
    assert matched(report) == {"algorithm": "sha256", "digest": sha256(data),
                               "source": "the Hugging Face cache's blob name", "note": None}
    flip(blob, len(data) - 1)
    report = ggaudit.check("hf:org/tiny", hf_cache=tmp_path / "hub")
    assert (report.verdict, report.reference, report.ok) == ("damaged", "published", False)
    assert differs(report) == {"algorithm": "sha256", "expected": sha256(data),
                               "actual": hashlib.sha256(blob.read_bytes()).hexdigest(),
                               "source": "the Hugging Face cache's blob name", "note": None}
    # The file as the repository names it (gguf/tiny.gguf, not the blob's hash nor the base name).
    assert report.next_steps == ("the download is damaged: download it again, replacing the cached copy: "
                                 "`hf download org/tiny gguf/tiny.gguf --force-download`",)


def test_hf_local_dir_intact_then_damaged_names_hf_download_with_its_local_dir(tmp_path: Path) -> None:
    local = hf_local_dir(tmp_path / "dl")
    data = local.good.read_bytes()
    report = ggaudit.check(f"hf-local:{local.root}")
    assert (report.verdict, report.reference) == ("intact", "published")
    assert matched(report) == {"algorithm": "sha256", "digest": sha256(data),
                               "source": "the etag of its Hugging Face download metadata", "note": None}
    flip(local.good, len(data) - 1)
    os.utime(local.good, (1_700_000_000.0, 1_700_000_000.0))   # as downloaded: not newer than its metadata
    report = ggaudit.check(f"hf-local:{local.root}")
    assert (report.verdict, differs(report)["expected"]) == ("damaged", sha256(data))
    assert report.next_steps == (
        "the download is damaged: download it again into its folder, replacing the copy: `hf download REPO "
        f"model.gguf --force-download --local-dir {local.root}` (REPO: the repository it came from)",)


def test_gpt4all_md5_intact_and_damaged_with_the_apps_download_steps(tmp_path: Path) -> None:
    paths = gpt4all_folder(tmp_path / "gpt4all")
    good = ggaudit.check("gpt4all:good.gguf", store=tmp_path / "gpt4all")
    assert (good.verdict, good.reference) == ("intact", "published")
    assert matched(good) == {"algorithm": "md5", "digest": hashlib.md5(paths["good"].read_bytes()).hexdigest(),
                             "source": "GPT4All's model list's md5", "note": None}
    bad = ggaudit.check("gpt4all:badmd5.gguf", store=tmp_path / "gpt4all")
    assert (bad.verdict, bad.reference) == ("damaged", "published")
    assert differs(bad) == {"algorithm": "md5", "expected": "0" * 32,
                            "actual": hashlib.md5(paths["badmd5"].read_bytes()).hexdigest(),
                            "source": "GPT4All's model list's md5", "note": None}
    assert bad.next_steps == ("the download is damaged: with GPT4All closed, delete badmd5.gguf from its download "
                              "folder, then download it again in GPT4All (Models, `+ Add Model`, search, `Download`)",)


def test_lmstudio_keeps_no_digest_so_every_path_agreeing_is_unverified_and_exit_0(tmp_path: Path) -> None:
    lmstudio_models(tmp_path / "models")
    report = ggaudit.check("lmstudio:pub/good", store=tmp_path / "models")
    assert (report.verdict, report.reference, report.ok, report.store) == ("unverified", None, True, "lmstudio")
    codes = [c.code for c in report.conclusions]
    assert (codes[0], codes[-1]) == ("no-published-reference", "nothing-wrong")
    assert report.files[0].published is None
    assert report.next_steps[0].startswith("to decide which bytes are the publisher's, make a manifest where the "
                                           "model works (`ggaudit manifest MODEL -o model.manifest.json` there)")


def test_sums_file_line_decides_and_a_wrong_line_is_damaged(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(gguf(5))
    sums = tmp_path / "SHA256SUMS"
    sums.write_text(f"{'0' * 64}  other.gguf\n{sha256(model.read_bytes())}  m.gguf\n")
    report = ggaudit.check(model, sums=sums)
    assert (report.verdict, report.reference) == ("intact", "published")
    assert matched(report) == {"algorithm": "sha256", "digest": sha256(model.read_bytes()),
                               "source": "the checksum file's line 2", "note": None}
    sums.write_text(f"{'e' * 64}  m.gguf\n")
    report = ggaudit.check(model, sums=sums)
    assert (report.verdict, differs(report)["expected"], differs(report)["source"]) == (
        "damaged", "e" * 64, "the checksum file's line 1")
    assert report.next_steps == ("the file differs from what was published: download it again and check again; if "
                                 "a new download differs the same way, tell the publisher",)
