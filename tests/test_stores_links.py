"""Stores, links, inputs and proportional cost (issue 11, classes 2, 4 and 8, and their class-1 inputs).

Nothing outside a store or folder is opened, walked or quoted (HF refs and snapshots, tensor-manifest
files, split shards, Ollama blobs, sums entries); a symlink loop is one line, exit 2 (or one reported
entry where the others still count); capture files are regular files read from one descriptor, and
damaged ones are one line; verification costs what the distinct files cost, and quoted input is short.
"""

from __future__ import annotations

import hashlib
import io as pyio
import json
import os
import time
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest

import ggaudit.io.opening
import ggaudit.io.positioned
from ggaudit.errors import FormatError, ManifestError, UsageError
from ggaudit.format.layout import open_model
from ggaudit.stores.hf import default_hf_cache, read_hf_snapshot
from ggaudit.stores.ollama import default_ollama_store
from ggaudit.verify.manifests.tensor import read_tensor_manifest
from ggaudit.stores import ollama as ollama_mod
from ggaudit.untrusted import quote
from ggaudit.verify.walk.ollama import verify_ollama
from ggaudit.verify.walk.sums import verify_sums
from ggaudit.verify.walk.tensors import verify_tensor_manifest

from platforms import needs_fifo, needs_linux, needs_symlinks
from support import assert_one_line_error, run_cli, write_small_model, write_split_set

COMMIT = "0123456789abcdef0123456789abcdef01234567"
SECRET = "root:x:0:0:secret first line"


def _hf_repo(tmp_path: Path) -> tuple[Path, Path]:
    """A cache holding org/name at COMMIT with one good file; returns (cache, repo folder)."""
    cache = tmp_path / "hub"
    repo = cache / "models--org--name"
    snap = repo / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    (repo / "blobs").mkdir()
    (repo / "refs").mkdir()
    data = b"weights"
    digest = hashlib.sha256(data).hexdigest()
    (repo / "blobs" / digest).write_bytes(data)
    (snap / "m.gguf").symlink_to(f"../../blobs/{digest}")
    (repo / "refs" / "main").write_text(COMMIT)
    return cache, repo


def _outside_secret(tmp_path: Path) -> Path:
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET + "\n")
    return secret


# --- the Hugging Face cache ------------------------------------------------------------------------

@needs_symlinks
@pytest.mark.parametrize("target", ["secret", "loop", "dir"])
def test_hf_ref_linking_out_is_refused_unread(tmp_path: Path, target: str) -> None:
    cache, repo = _hf_repo(tmp_path)
    ref = repo / "refs" / "main"
    ref.unlink()
    if target == "secret":
        ref.symlink_to(_outside_secret(tmp_path))
        said = "ref is a link pointing outside the repository folder; not followed"
    elif target == "loop":
        (repo / "refs" / "other").symlink_to(ref)
        ref.symlink_to(repo / "refs" / "other")
        said = "ref is a symlink loop"
    else:
        ref.symlink_to(tmp_path)
        said = "ref is a link pointing outside the repository folder; not followed"
    with pytest.raises(ManifestError) as caught:
        read_hf_snapshot("org/name", cache)
    assert caught.value.message == said
    line = assert_one_line_error(_hf_cli(cache), said)
    assert "secret" not in line.replace(str(tmp_path), "")


def _hf_cli(cache: Path):
    from click.testing import CliRunner

    from ggaudit.cli import main

    return CliRunner(env={"HF_HUB_CACHE": str(cache)}).invoke(main, ["verify", "hf:org/name"])


@needs_symlinks
def test_hf_ref_inside_the_repo_is_still_read_and_its_text_cut(tmp_path: Path) -> None:
    cache, repo = _hf_repo(tmp_path)
    (repo / "refs" / "main").write_text("x" * 5000)
    with pytest.raises(ManifestError) as caught:
        read_hf_snapshot("org/name", cache)
    assert caught.value.message == f"ref does not hold a 40-hex commit: {quote('x' * 5000)}"
    assert caught.value.message.endswith("... (5000 chars)") and len(caught.value.message) < 110


@needs_symlinks
@pytest.mark.parametrize("which", ["snapshot", "snapshots", "blobs"])
def test_hf_folders_linking_out_are_never_walked(tmp_path: Path, which: str) -> None:
    cache, repo = _hf_repo(tmp_path)
    big = tmp_path / "big"
    (big / COMMIT).mkdir(parents=True)
    for i in range(50):
        (big / COMMIT / f"f{i}").write_text("x")
    walked: list[str] = []
    real_walk = os.walk
    folder = {"snapshot": repo / "snapshots" / COMMIT, "snapshots": repo / "snapshots",
              "blobs": repo / "blobs"}[which]
    os.rename(folder, tmp_path / "moved")
    folder.symlink_to(big / COMMIT if which == "snapshot" else big)
    what = {"snapshot": "snapshot", "snapshots": "snapshot", "blobs": "blobs folder"}[which]
    try:
        os.walk = lambda top, *a, **k: walked.append(str(top)) or real_walk(top, *a, **k)  # type: ignore
        with pytest.raises(ManifestError, match=f"{what} is a link pointing outside the repository folder"):
            read_hf_snapshot("org/name", cache)
    finally:
        os.walk = real_walk  # type: ignore[assignment]
    assert walked == []


@needs_symlinks
def test_hf_snapshot_file_loop_is_one_entry_and_the_others_are_checked(tmp_path: Path) -> None:
    cache, repo = _hf_repo(tmp_path)
    snap = repo / "snapshots" / COMMIT
    (snap / "a").symlink_to(snap / "b")
    (snap / "b").symlink_to(snap / "a")
    shot = read_hf_snapshot("org/name", cache)
    problems = {f.name: f.problem for f in shot.files}
    assert problems == {"a": "link is a symlink loop", "b": "link is a symlink loop", "m.gguf": None}
    result = _hf_cli(cache)
    assert result.exit_code == 1, result.output
    assert result.stdout.count("MISMATCH link:") == 2 and "ok sha256" in result.stdout


# --- tensor manifest files and split shards --------------------------------------------------------

@needs_symlinks
@pytest.mark.parametrize("kind", ["outside", "loop"])
def test_tensor_manifest_file_linking_out_is_reported_not_opened(tmp_path: Path, kind: str) -> None:
    (tmp_path / "set").mkdir()
    shards = write_split_set(tmp_path / "set")
    manifest = tmp_path / "m.json"
    assert run_cli(["manifest", shards[0], "-o", manifest]).exit_code == 0
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    os.replace(shards[1], outside / shards[1].name)
    if kind == "outside":
        shards[1].symlink_to(outside / shards[1].name)
        detail = "resolves outside the model's folder (a link pointing out): not followed"
    else:
        shards[1].symlink_to(shards[1])
        detail = "is a symlink loop"
    opened: list[str] = []
    real_open = ggaudit.io.opening.open_fd
    ggaudit.io.opening.open_fd = lambda p, *a: opened.append(os.fspath(p)) or real_open(p, *a)  # type: ignore
    try:
        report = verify_tensor_manifest(shards[0], manifest)
    finally:
        ggaudit.io.opening.open_fd = real_open  # type: ignore[assignment]
    assert [(m.kind, m.path, m.detail) for m in report.mismatches] == [("link", str(shards[1]), detail)]
    assert str(shards[1]) not in opened
    text = run_cli(["verify", shards[0], "--manifest", manifest])
    assert text.exit_code == 1 and f"MISMATCH link: file {shards[1]}" in text.stdout
    assert str(outside) not in text.stdout


def test_tensor_manifest_file_name_with_a_nul_is_a_manifest_error(tmp_path: Path) -> None:
    model = write_small_model(tmp_path / "m.gguf")
    manifest = tmp_path / "m.json"
    assert run_cli(["manifest", model, "-o", manifest]).exit_code == 0
    doc = json.loads(manifest.read_text())
    for name in ("m\0.gguf", "\0", "m.gguf\0../x"):
        doc["files"][0]["name"] = name
        manifest.write_text(json.dumps(doc))
        with pytest.raises(ManifestError) as caught:
            read_tensor_manifest(manifest)
        assert (caught.value.field, caught.value.message) == ("files[0].name",
                                                              "holds a NUL byte, which no file name can")
        assert_one_line_error(run_cli(["verify", model, "--manifest", manifest]), "files[0].name: holds a NUL byte")


@needs_symlinks
@pytest.mark.parametrize("kind", ["file", "dir", "loop", "dangling"])
def test_split_shard_linking_out_is_refused_before_reading(tmp_path: Path, kind: str) -> None:
    folder = tmp_path / "set"
    folder.mkdir()
    shards = write_split_set(folder)
    shards[1].unlink()
    secret = _outside_secret(tmp_path)
    target = {"file": secret, "dir": tmp_path, "loop": shards[1], "dangling": tmp_path / "gone.gguf"}[kind]
    shards[1].symlink_to(target)
    said = "is a symlink loop" if kind == "loop" else "resolves outside the folder (a link pointing out): not opened"
    with pytest.raises(FormatError) as caught:
        open_model(shards[0])
    assert (caught.value.path, caught.value.field, caught.value.message) == (str(shards[1]), "split",
                                                                              f"shard 2 of 2 {said}")
    for command in ("info", "scan"):
        line = assert_one_line_error(run_cli([command, shards[0]]), f"shard 2 of 2 {said}")
        assert "root:x" not in line


@needs_symlinks
def test_split_shards_linked_into_blobs_like_a_hf_snapshot_still_open(tmp_path: Path) -> None:
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    snap = tmp_path / "snapshots" / "c"
    snap.mkdir(parents=True)
    for shard in write_split_set(blobs):
        blob = blobs / hashlib.sha256(shard.read_bytes()).hexdigest()
        os.replace(shard, blob)
        (snap / shard.name).symlink_to(os.path.relpath(blob, snap))
    model = open_model(snap / "split-00001-of-00002.gguf")
    assert len(model.files) == 2


# --- the Ollama store ------------------------------------------------------------------------------

def _ollama(tmp_path: Path, layers: list[dict]) -> Path:
    store = tmp_path / "store"
    manifest = store / "manifests" / "registry.ollama.ai" / "library" / "x" / "latest"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": layers}))
    (store / "blobs").mkdir()
    return store


@needs_symlinks
def test_ollama_blob_and_manifest_loops_are_one_line(tmp_path: Path) -> None:
    digest = "ab" * 32
    store = _ollama(tmp_path, [{"mediaType": ollama_mod.MEDIA_MODEL, "digest": f"sha256:{digest}", "size": 1}])
    blob = store / "blobs" / f"sha256-{digest}"
    blob.symlink_to(blob)
    report = verify_ollama("x", store)
    assert [(m.kind, m.detail) for m in report.mismatches] == [("link", "blob is a symlink loop")]
    assert_one_line_error(run_cli(["scan", "ollama:x", "--store", store]), f"sha256-{digest}: digest: blob is a "
                                                                            "symlink loop")
    manifest = store / "manifests" / "registry.ollama.ai" / "library" / "x" / "latest"
    manifest.unlink()
    manifest.symlink_to(manifest)
    for command in ("verify", "scan", "info"):
        assert_one_line_error(run_cli([command, "ollama:x", "--store", store]), "latest: manifest is a symlink loop")


def test_home_unknown_says_what_to_set(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    for platform in ("linux", "darwin", "win32"):
        with pytest.raises(UsageError) as caught:
            default_ollama_store({}, platform)
        assert caught.value.message == ("cannot tell the home folder (HOME is not set); pass store= or set "
                                        "OLLAMA_MODELS")     # the library's parameter; the CLI's --store below
    with pytest.raises(UsageError, match=r"\(HOME is not set\); set HF_HUB_CACHE or HF_HOME$"):
        default_hf_cache({})
    assert default_ollama_store({"OLLAMA_MODELS": "/m"}, "linux") == Path("/m")
    assert default_hf_cache({"HF_HOME": "/h"}) == Path("/h") / "hub"
    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.delenv("USERPROFILE", raising=False)
    monkeypatch.delenv("OLLAMA_MODELS", raising=False)
    assert_one_line_error(run_cli(["scan", "ollama:x"]), "pass --store or set OLLAMA_MODELS")


# --- checksum files --------------------------------------------------------------------------------

@needs_symlinks
@pytest.mark.parametrize("kind", ["outside", "loop", "dir-out"])
def test_sums_link_line_is_one_entry_among_the_others(tmp_path: Path, kind: str) -> None:
    folder = tmp_path / "sums"
    folder.mkdir()
    good = folder / "good.gguf"
    good.write_bytes(b"good")
    secret = _outside_secret(tmp_path)
    bad = folder / "bad.gguf"
    if kind == "outside":
        bad.symlink_to(secret)
        name = "bad.gguf"
    elif kind == "loop":
        bad.symlink_to(bad)
        name = "bad.gguf"
    else:
        (folder / "up").symlink_to(tmp_path)
        name = "up/secret.txt"
    good_hex = hashlib.sha256(b"good").hexdigest()
    sums = folder / "SHA256SUMS"
    sums.write_text(f"{good_hex}  good.gguf\n{'1' * 64}  {name}\n{good_hex}  good.gguf\n")
    report = verify_sums(sums)
    detail = "is a symlink loop" if kind == "loop" else \
        "resolves outside the checksum file's folder (a link pointing out): not followed"
    assert [(m.kind, m.subject, m.detail) for m in report.mismatches] == [("link", name, f"line 2: {detail}")]
    assert [(c.subject, c.ok) for c in report.checked] == [("good.gguf", True), ("good.gguf", True)]
    result = run_cli(["verify", "--sums", sums])
    assert result.exit_code == 1 and result.stderr == ""
    assert f"line 2: {detail}" in result.stdout and SECRET not in result.stdout


@pytest.mark.scale
def test_one_file_named_65536_times_is_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "m.gguf").write_bytes(b"model bytes")
    (tmp_path / "other.gguf").write_bytes(b"other")
    digest = hashlib.sha256(b"model bytes").hexdigest()
    lines = [f"{digest}  m.gguf", f"{digest}  ./m.gguf", f"{'0' * 64}  other.gguf"] * 21845
    sums = tmp_path / "SHA256SUMS"
    sums.write_text("\n".join(lines) + "\n")
    reads: list[int] = []
    real = ggaudit.io.positioned.pread_into
    monkeypatch.setattr(ggaudit.io.positioned, "pread_into",
                        lambda fd, view, off: reads.append(fd) or real(fd, view, off))
    started = time.monotonic()
    report = verify_sums(sums)
    assert time.monotonic() - started < 20
    assert len(reads) == 2      # one read of each distinct file, each ending in one request
    assert len(report.checked) == len(lines) and len(report.mismatches) == 21845
    assert report.stats.bytes_hashed == len(b"model bytes") + len(b"other")
    assert {m.subject for m in report.mismatches} == {"other.gguf"}


@pytest.mark.scale
def test_200k_identical_ollama_layers_verify_in_proportion(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data, other = b"blob bytes", b"config"
    layers = [{"mediaType": "m", "digest": f"sha256:{hashlib.sha256(data).hexdigest()}", "size": len(data)}] * 200_000
    layers.append({"mediaType": "c", "digest": f"sha256:{hashlib.sha256(other).hexdigest()}", "size": 1})
    store = _ollama(tmp_path, layers)
    for content in (data, other):
        (store / "blobs" / f"sha256-{hashlib.sha256(content).hexdigest()}").write_bytes(content)
    reads: list[int] = []
    real = ggaudit.io.positioned.pread_into
    monkeypatch.setattr(ggaudit.io.positioned, "pread_into",
                        lambda fd, view, off: reads.append(fd) or real(fd, view, off))
    started = time.monotonic()
    report = verify_ollama("x", store)
    # A hang guard, not a speed target (about 1 s here): work quadratic in 200k layers would take hours.
    assert time.monotonic() - started < 60
    assert len(reads) == 1          # the config's size is wrong: never hashed
    assert len(report.checked) == 200_000 and [m.kind for m in report.mismatches] == ["size"]


@pytest.mark.parametrize("line", [
    "A" * (20 << 20) + " (m.gguf) = " + "0" * 64,             # a 20 MiB algorithm name
    "0" * 64 + "  ../" + "x" * (20 << 20),                     # a 20 MiB name leaving the folder
    "0" * 64 + "  " + "\x1b[2J" * 100_000 + "\0",              # long, and hostile
])
def test_huge_lines_make_short_error_lines(tmp_path: Path, line: str) -> None:
    sums = tmp_path / "SHA256SUMS"
    sums.write_text(line + "\n")
    out = assert_one_line_error(run_cli(["verify", "--sums", sums]), "line 1")
    assert len(out) < 200 + len(str(sums)), len(out)
    assert "chars)" in out


# --- capture files and --seed ----------------------------------------------------------------------

@pytest.fixture()
def model(tmp_path: Path) -> Path:
    return write_small_model(tmp_path / "m.gguf", rows=8)


def _npz(**arrays: np.ndarray) -> bytes:
    buf = pyio.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _good_npz() -> bytes:
    return _npz(ids=np.arange(2, dtype=np.int64), rows=np.zeros((2, 68), dtype=np.uint8))


def _bad_crc() -> bytes:
    data = bytearray(_good_npz())
    at = data.rindex(b"\x00" * 40)      # inside the stored (uncompressed) rows of zeros
    data[at] = 1
    return bytes(data)


def _object_npy() -> bytes:
    buf = pyio.BytesIO()
    np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    return buf.getvalue()


def _cut_npy() -> bytes:
    buf = pyio.BytesIO()
    np.save(buf, np.zeros(4, dtype=[("ids", "<i8"), ("rows", "u1", (68,))]))
    return buf.getvalue()[:-10]


def _object_member_npz() -> bytes:
    buf = pyio.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("ids.npy", _object_npy())
        z.writestr("rows.npy", _object_npy())
    return buf.getvalue()


def _deflate_garbage() -> bytes:
    buf = pyio.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("ids.npy", b"x" * 1000)
        z.writestr("rows.npy", b"x" * 1000)
    data = bytearray(buf.getvalue())
    data[40:60] = b"\xff" * 20      # inside the first member's deflate stream
    return bytes(data)


@pytest.mark.parametrize("content, suffix, said", [
    (b"", ".npz", "cannot load the capture: "),
    (os.urandom(300), ".npz", "cannot load the capture: "),
    (_good_npz()[:200], ".npz", "cannot load the capture: "),
    (_bad_crc(), ".npz", "Bad CRC-32 for file 'rows.npy'"),
    (_deflate_garbage(), ".npz", ""),
    (_object_npy(), ".npy", "holds Python objects, which are refused"),
    (_object_member_npz(), ".npz", "holds Python objects, which are refused"),
    (_cut_npy(), ".npy",
     "cannot load the capture: EOF: the header promises 304 bytes of array data, the file holds 294"),
    (b"\x80\x04K\x01.", ".npz", "pickled"),
], ids=["empty", "random", "cut-zip", "bad-crc", "bad-deflate", "object-npy", "object-npz", "cut-npy", "pickle"])
def test_damaged_captures_are_one_line(model: Path, tmp_path: Path, content: bytes, suffix: str, said: str) -> None:
    capture = tmp_path / f"capture{suffix}"
    capture.write_bytes(content)
    line = assert_one_line_error(run_cli(["rows", model, "--ids", "0-1", "--against", capture]), str(capture), said)
    assert len(line) < 400


def _python2_npy(rows: bytes) -> bytes:
    """A structured .npy whose header is in Python 2's syntax (``2L``): numpy parses it, with a warning."""
    header = b"{'descr': [('ids', '<i8'), ('rows', '|u1', (68,))], 'fortran_order': False, 'shape': (2L,), }"
    header += b" " * (-(10 + len(header) + 1) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + rows


@pytest.mark.parametrize("rows", [bytes(2 * (8 + 68)), bytes(10)], ids=["whole", "cut"])
def test_numpy_warnings_never_reach_stderr(model: Path, tmp_path: Path, rows: bytes) -> None:
    """numpy warns about the old header on stderr; the capture is loaded (or refused) in one line and
    nothing else. (Warnings are recorded here: pytest would otherwise swallow them.)"""
    capture = tmp_path / "old.npy"
    capture.write_bytes(_python2_npy(rows))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        result = run_cli(["rows", model, "--ids", "0-1", "--against", capture])
    assert [str(w.message) for w in seen] == []
    if rows == bytes(10):
        assert_one_line_error(result, str(capture), "the header promises 152 bytes of array data")
    else:
        assert (result.exit_code, result.stderr) == (1, ""), result.output      # zeros, not the file's rows
        assert ": 2 raw rows (uint8), 2 differ" in result.stdout


@needs_fifo
def test_fifo_capture_is_refused_without_waiting(model: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "capture.npz"
    os.mkfifo(fifo)
    started = time.monotonic()
    assert_one_line_error(run_cli(["rows", model, "--ids", "0", "--against", fifo]),
                          f"{fifo}: cannot read the capture: not a regular file")
    assert time.monotonic() - started < 5


@needs_linux
@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom", "/dev/null"])
def test_device_capture_is_refused(model: Path, device: str) -> None:
    assert_one_line_error(run_cli(["rows", model, "--ids", "0", "--against", device]),
                          f"{device}: cannot read the capture: not a regular file")


def test_directory_capture_is_refused(model: Path, tmp_path: Path) -> None:
    assert_one_line_error(run_cli(["rows", model, "--ids", "0", "--against", tmp_path]), "is a directory")


def test_oversized_capture_is_refused_before_reading(model: Path, tmp_path: Path) -> None:
    capture = tmp_path / "huge.npy"
    with open(capture, "wb") as f:   # sparse: no disk used
        f.truncate(10 << 30)
    line = assert_one_line_error(run_cli(["rows", model, "--ids", "0", "--against", capture]),
                                 f"the capture is {10 << 30} bytes, more than")
    assert "could take" in line


def test_good_captures_still_load(model: Path, tmp_path: Path) -> None:
    npz = tmp_path / "c.npz"
    npz.write_bytes(_good_npz())
    result = run_cli(["rows", model, "--ids", "0-1", "--against", npz])
    assert result.exit_code in (0, 1) and result.stderr == "", result.output + result.stderr
    npy = tmp_path / "c.npy"
    structured = np.zeros(2, dtype=[("ids", "<i8"), ("rows", "u1", (68,))])
    structured["ids"] = [0, 1]
    np.save(npy, structured)
    result = run_cli(["rows", model, "--ids", "0-1", "--against", npy])
    assert result.exit_code in (0, 1) and result.stderr == "", result.output + result.stderr


@pytest.mark.parametrize("seed, said", [
    ("-1", "ggaudit: error: --seed: must be an integer in 0..4294967295"),
    ("4294967296", "ggaudit: error: --seed: must be an integer in 0..4294967295"),
    ("9" * 5000, "--seed"),
    ("abc", "--seed"),
    ("1.5", "--seed"),
])
def test_bad_seeds_are_usage_errors(model: Path, seed: str, said: str) -> None:
    assert_one_line_error(run_cli(["rows", model, "--random", "2", "--seed", seed]), said)


def test_edge_seeds_are_fine(model: Path) -> None:
    for seed in ("0", "4294967295"):
        result = run_cli(["rows", model, "--random", "2", "--seed", seed])
        assert result.exit_code == 0, result.output + result.stderr
