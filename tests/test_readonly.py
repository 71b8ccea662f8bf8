"""Read-only (issue 6): no command writes to what it audits.

Every command runs on copies of the fixtures (and a checksum file, a tensor manifest, an Ollama store
and a split set); afterwards every audited file has the same bytes, mtime, size, inode and mode. While
the commands run, ``os.open``, ``open`` and ``mmap.mmap`` are wrapped, and every open of an audited
file must be read-only: no O_WRONLY/O_RDWR/O_CREAT/O_TRUNC/O_APPEND, no "w"/"a"/"+" mode, no writable
mapping.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import mmap
import os
import sys
import shutil
from pathlib import Path
from typing import Any

import pytest

from support import FIXTURES, run_cli

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class OpenLog:
    """Records every open of a file under ``root`` and whether it could write."""

    def __init__(self, root: Path, allowed: set[Path]) -> None:
        self.root = root.resolve()
        self.allowed = {p.resolve() for p in allowed}      # outputs the command is asked to write
        self.opens: list[tuple[str, str]] = []
        self.writes: list[tuple[str, str]] = []

    def _audited(self, path: Any) -> Path | None:
        if isinstance(path, int):
            return None
        try:
            resolved = Path(os.fsdecode(path)).resolve()
        except (TypeError, ValueError):
            return None
        if self.root not in resolved.parents or resolved in self.allowed or resolved.name.startswith("."):
            return None
        return resolved

    def note(self, path: Any, how: str, writes: bool) -> None:
        audited = self._audited(path)
        if audited is not None:
            self.opens.append((str(audited), how))
            if writes:
                self.writes.append((str(audited), how))


@pytest.fixture()
def open_log(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> OpenLog:
    log = OpenLog(tmp_path / "audited", {tmp_path / "audited" / "out.json"})
    real_os_open, real_open, real_mmap = os.open, builtins.open, mmap.mmap
    fd_paths: dict[int, str] = {}

    def os_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        log.note(path, f"os.open flags={flags:#o}", bool(flags & _WRITE_FLAGS))
        fd = real_os_open(path, flags, *args, **kwargs)
        fd_paths[fd] = os.fsdecode(path) if not isinstance(path, int) else ""
        return fd

    def open_(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        path = fd_paths.get(file, "") if isinstance(file, int) else file
        log.note(path, f"open mode={mode}", any(c in mode for c in "wax+"))
        return real_open(file, mode, *args, **kwargs)

    class RecordingMmap(real_mmap):  # type: ignore[misc, valid-type]
        def __new__(cls, fileno: int, length: int, *args: Any, **kwargs: Any) -> Any:
            if sys.platform == "win32":
                # Windows signature: mmap(fileno, length, tagname=None, access=ACCESS_DEFAULT (write), offset=0)
                access = kwargs.get("access", args[1] if len(args) > 1 else mmap.ACCESS_DEFAULT)
                writable = access in (mmap.ACCESS_WRITE, mmap.ACCESS_DEFAULT)
            else:
                # Unix signature: mmap(fileno, length, flags=MAP_SHARED, prot=PROT_WRITE|PROT_READ, access=...)
                flags = kwargs.get("flags", args[0] if args else mmap.MAP_SHARED)
                prot = kwargs.get("prot", args[1] if len(args) > 1 else mmap.PROT_READ | mmap.PROT_WRITE)
                access = kwargs.get("access", args[2] if len(args) > 2 else mmap.ACCESS_DEFAULT)
                writable = access == mmap.ACCESS_WRITE or (access == mmap.ACCESS_DEFAULT
                                                          and bool(prot & mmap.PROT_WRITE)
                                                          and bool(flags & mmap.MAP_SHARED))
            if fileno != -1:
                log.note(fd_paths.get(fileno, ""), f"mmap access={access}", writable)
            return super().__new__(cls, fileno, length, *args, **kwargs)

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(builtins, "open", open_)
    monkeypatch.setattr(mmap, "mmap", RecordingMmap)
    return log


def _fingerprint(root: Path) -> dict[str, tuple[Any, ...]]:
    out = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        st = path.stat()
        out[str(path)] = (hashlib.sha256(path.read_bytes()).hexdigest(), st.st_size, st.st_mtime_ns,
                          st.st_ino, st.st_mode)
    return out


@pytest.fixture()
def audited(tmp_path: Path) -> dict[str, Path]:
    root = tmp_path / "audited"
    root.mkdir()
    files = {}
    for name in ("ple_iq4_nl.gguf", "all_types-f32-nan.gguf", "all_types.gguf", "split-00001-of-00002.gguf",
                 "split-00002-of-00002.gguf"):
        files[name] = Path(shutil.copy(FIXTURES / name, root / name))
    data = files["ple_iq4_nl.gguf"].read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    sums = root / "SHA256SUMS"
    sums.write_text(f"{digest}  ple_iq4_nl.gguf\n")
    files["sums"] = sums
    blob = root / "store" / "blobs" / f"sha256-{digest}"
    blob.parent.mkdir(parents=True)
    blob.write_bytes(data)
    files["blob"] = blob
    manifest = root / "store" / "manifests" / "registry.ollama.ai" / "library" / "m" / "latest"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": [
        {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}", "size": len(data)}]}))
    tensor_manifest = root / "ple.manifest.json"
    assert run_cli(["manifest", files["ple_iq4_nl.gguf"], "-o", tensor_manifest]).exit_code == 0
    files["manifest"] = tensor_manifest
    return files


def _commands(f: dict[str, Path]) -> list[list[object]]:
    ple, nan, split = f["ple_iq4_nl.gguf"], f["all_types-f32-nan.gguf"], f["split-00002-of-00002.gguf"]
    out = f["sums"].parent / "out.json"
    return [
        ["info", ple], ["info", split, "--json"],
        ["scan", nan], ["scan", split, "--deep", "--json"], ["scan", "ollama:m", "--store", f["blob"].parents[1]],
        ["manifest", ple, "-o", out],
        ["verify", ple, "--manifest", f["manifest"]], ["verify", "--sums", f["sums"]], ["verify", f["blob"]],
        ["verify", "ollama:m", "--store", f["blob"].parents[1]],
        ["diff", f["all_types.gguf"], nan],
        ["rows", ple, "--all"], ["rows", ple, "--random", "50", "--seed", "1", "--cache-rows", "16"],
        ["rows", ple, "--page-crossing", "--modes", "direct", "--json"],
    ]


def test_no_command_writes_to_or_opens_for_writing_what_it_audits(audited: dict[str, Path],
                                                                     open_log: OpenLog) -> None:
    root = audited["sums"].parent
    before = _fingerprint(root)
    assert len(before) >= 9
    for args in _commands(audited):
        result = run_cli(args)
        assert result.exit_code in (0, 1), (args, result.output, result.stderr, result.exception)
        # Exit 1 is also what an uncaught exception gives: the recording wrappers must not have raised.
        assert result.exception is None or isinstance(result.exception, SystemExit), (args, result.exception)
        (root / "out.json").unlink(missing_ok=True)
        after = _fingerprint(root)
        changed = [p for p in before if before[p] != after.get(p)]
        assert not changed, (args, changed)
        assert set(after) == set(before), (args, set(after) ^ set(before))
    assert not open_log.writes, open_log.writes
    opened = {p for p, _ in open_log.opens}
    # The wrapper saw the audited files being opened (it would not pass vacuously).
    assert {str(audited[k].resolve()) for k in ("ple_iq4_nl.gguf", "sums", "blob", "manifest")} <= opened
    assert any(how.startswith("mmap") for _, how in open_log.opens)


def test_the_open_log_catches_a_write(audited: dict[str, Path], open_log: OpenLog) -> None:
    """The wrapper really does flag a write-capable open of an audited file."""
    fd = os.open(audited["sums"], os.O_RDWR)
    os.close(fd)
    with open(audited["sums"], "r+b"):
        pass
    assert [how.split()[0] for _, how in open_log.writes] == ["os.open", "open"]
