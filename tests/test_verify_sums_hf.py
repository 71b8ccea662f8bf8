"""`verify --sums FILE` in every checksum format, and `verify hf:ORG/NAME` against a real cache layout."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from ggaudit.cli import main
from ggaudit.verify.walk.hf import verify_hf
from ggaudit.verify.walk.sums import verify_sums

from platforms import needs_symlinks


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def files(tmp_path: Path) -> dict[str, bytes]:
    contents = {"a.gguf": b"alpha" * 100, "b.gguf": b"beta" * 77, "sub/c.gguf": b"gamma", "d e.gguf": b"delta"}
    for name, data in contents.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(data)
    return contents


def test_every_format_verifies_clean(tmp_path: Path, files: dict[str, bytes]) -> None:
    (tmp_path / "SUMS").write_text(
        f"{_sha(files['a.gguf']).upper()}  a.gguf\n"
        f"SHA256 (b.gguf) = {_sha(files['b.gguf'])}\n"
        f"SHA2-256(sub/c.gguf)= {_sha(files['sub/c.gguf'])}\n"
        f"{_sha(files['d e.gguf'])} *d e.gguf\n")
    report = verify_sums(tmp_path / "SUMS")
    assert report.ok
    assert [c.subject for c in report.checked] == ["a.gguf", "b.gguf", "sub/c.gguf", "d e.gguf"]
    assert report.stats.bytes_hashed == sum(len(v) for v in files.values())


def test_mismatch_and_missing_are_reported_with_expected_then_actual(tmp_path: Path,
                                                                     files: dict[str, bytes]) -> None:
    (tmp_path / "SUMS").write_text(f"{'0' * 64}  a.gguf\n{_sha(b'x')}  gone.gguf\n"
                                   f"{_sha(files['b.gguf'])}  b.gguf\n")
    result = CliRunner().invoke(main, ["verify", "--sums", str(tmp_path / "SUMS")])
    assert result.exit_code == 1
    lines = result.output.splitlines()
    a = tmp_path.resolve() / "a.gguf"
    assert lines[1:] == [
        f"ok sha256 {_sha(files['b.gguf'])}: file {tmp_path.resolve() / 'b.gguf'}, 308 bytes (b.gguf)",
        f"MISMATCH sha256: file {a}, offset 0, length 500 (a.gguf): sha256 differs",
        f"  expected: {'0' * 64}",
        f"  actual:   {_sha(files['a.gguf'])}",
        f"MISMATCH missing: file {tmp_path.resolve() / 'gone.gguf'} (gone.gguf): file not found",
        f"  expected: {_sha(b'x')}",
        "  actual:   -",
        "summary: 2 files checked, 0 from the cache, 808 bytes hashed, 2 mismatches",
    ]


def test_escaping_name_is_an_error_exit_2(tmp_path: Path, files: dict[str, bytes]) -> None:
    (tmp_path / "sub" / "SUMS").write_text(f"{_sha(files['a.gguf'])}  ../a.gguf\n")
    result = CliRunner().invoke(main, ["verify", "--sums", str(tmp_path / "sub" / "SUMS")])
    assert result.exit_code == 2
    assert result.stderr.endswith("line 1: name '../a.gguf' leaves the checksum file's folder\n")


def test_usage_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    assert runner.invoke(main, ["verify"]).exit_code == 2
    assert runner.invoke(main, ["verify", "x", "--sums", "y"]).exit_code == 2
    missing = runner.invoke(main, ["verify", "--sums", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "No such file or directory" in missing.stderr


# --- Hugging Face cache -----------------------------------------------------------------------

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _git_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@pytest.fixture
def hf_cache(tmp_path: Path) -> Path:
    """models--org--tiny with an LFS weight file, a small git file, and a README, all linked."""
    cache = tmp_path / "hub"
    repo = cache / "models--org--tiny"
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT + "\n")
    snap = repo / "snapshots" / COMMIT
    (snap / "gguf").mkdir(parents=True)
    for rel, data, name in (("gguf/tiny.gguf", b"GGUF" + bytes(1000), _sha(b"GGUF" + bytes(1000))),
                            ("config.json", b'{"a": 1}', _git_sha1(b'{"a": 1}')),
                            ("README.md", b"# tiny\n", _git_sha1(b"# tiny\n"))):
        (repo / "blobs" / name).write_bytes(data)
        depth = rel.count("/")
        (snap / rel).symlink_to("../" * (depth + 2) + f"blobs/{name}")
    return cache


@needs_symlinks
def test_hf_snapshot_verifies_clean_offline(hf_cache: Path) -> None:
    report = verify_hf("org/tiny", hf_cache)
    assert report.ok
    assert report.source == f"org/tiny@{COMMIT}"
    assert sorted((c.subject, c.algorithm) for c in report.checked) == [
        ("README.md", "git-sha1"), ("config.json", "git-sha1"), ("gguf/tiny.gguf", "sha256")]


@needs_symlinks
def test_hf_reports_corrupt_blob_broken_link_and_leftovers(hf_cache: Path) -> None:
    repo = hf_cache / "models--org--tiny"
    weights = repo / "blobs" / _sha(b"GGUF" + bytes(1000))
    with open(weights, "r+b") as f:
        f.seek(500)
        f.write(b"\x7f")
    (repo / "blobs" / _git_sha1(b"# tiny\n")).unlink()
    (repo / "blobs" / "deadbeef.incomplete").write_bytes(b"partial")
    report = verify_hf(f"org/tiny@{COMMIT}", hf_cache)
    kinds = {m.subject: m for m in report.mismatches}
    assert kinds["gguf/tiny.gguf"].kind == "sha256"
    assert kinds["gguf/tiny.gguf"].actual == _sha(b"GGUF" + bytes(496) + b"\x7f" + bytes(503))
    assert (kinds["README.md"].kind, kinds["README.md"].detail) == ("link", "broken link: blob missing")
    assert report.warnings == (f"leftover of an interrupted download: {repo / 'blobs' / 'deadbeef.incomplete'}",)
    result = CliRunner(env={"HF_HUB_CACHE": str(hf_cache)}).invoke(main, ["verify", "hf:org/tiny", "--json"])
    assert result.exit_code == 1
    doc = json.loads(result.stdout)["models"][0]
    assert sorted(m["subject"] for m in doc["mismatches"]) == ["README.md", "gguf/tiny.gguf"]
    # A warning goes to stderr whether or not it is a terminal: the JSON on stdout stays clean.
    assert result.stderr == ("ggaudit: warning: leftover of an interrupted download: "
                             f"{repo / 'blobs' / 'deadbeef.incomplete'}\n")


def test_hf_uncached_repo_is_exit_2(hf_cache: Path) -> None:
    result = CliRunner(env={"HF_HOME": os.fspath(hf_cache.parent)}).invoke(main, ["verify", "hf:org/other"])
    assert result.exit_code == 2
    assert "org/other is not in the Hugging Face cache" in result.stderr
