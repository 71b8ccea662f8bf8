"""Files changing underneath (issue 6).

A model truncated, replaced (a new file renamed over it) or rewritten in place while `scan`, `verify`,
`manifest` or `rows --all` reads it must give exit 2 and one clear error line naming the file: never a
SIGBUS, a traceback, or a report about bytes that are no longer there.

Each case runs the real CLI in a forked child (tests/changing_driver.py) that wraps ``os.pread``,
``os.preadv`` and ``mmap.mmap`` and changes the file at a chosen moment: after the N-th read of it, or
right after a mapping of it is made and before any byte is touched (the SIGBUS case). A child process,
because an unhandled SIGBUS kills the process that maps the file.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from ggaudit.format.build import TensorSpec, write_gguf

import changing_driver
from platforms import needs_fork
from support import run_cli, tensor_payload

MiB = 1 << 20


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A 24 MiB model (streamed reads: several 8 MiB chunks) and a 72 MiB one (scan --workers 2 maps it in
    worker processes); each has an embedding table for `rows --all`."""
    folder = tmp_path_factory.mktemp("changing-src")
    out = {}
    for name, mib in (("small", 24), ("big", 72)):
        rows = 4096
        table = TensorSpec("token_embd.weight", T.Q8_0, (64, rows), tensor_payload(T.Q8_0, (64, rows), seed=2))
        n = (mib * MiB) // 4
        bulk = TensorSpec("blk.0.ffn.weight", T.F32, (1024, n // 1024), np.ones(n // 1024 * 1024, "<f4").tobytes())
        path = folder / f"{name}.gguf"
        # The table last: cutting the file in half cuts into it, for `rows --all` to meet. No architecture: a
        # llama's loader would require every tensor of its layer, which the file's one bulk tensor is not.
        write_gguf(path, [bulk, table], {})
        out[name] = path
    return out


@dataclass(frozen=True)
class Case:
    id: str
    model: str                  # small | big
    command: tuple[str, ...]    # {model}, {manifest}, {sums} are filled in
    action: str                 # truncate | replace | rewrite
    when: str = "read"
    n: int = 2                  # the first read after the header (or the first mapping)
    target_is_blob: bool = False


CASES = [
    Case("scan-truncate", "small", ("scan", "{model}"), "truncate"),
    Case("scan-replace", "small", ("scan", "{model}"), "replace"),
    Case("scan-rewrite", "small", ("scan", "{model}"), "rewrite"),
    Case("scan-mapped-truncate", "big", ("scan", "{model}", "--workers", "2"), "truncate", "map", 1),
    Case("scan-mapped-replace", "big", ("scan", "{model}", "--workers", "2"), "replace", "map", 1),
    Case("scan-mapped-truncate-before-map", "big", ("scan", "{model}", "--workers", "2"), "truncate", "premap", 1),
    Case("manifest-truncate", "small", ("manifest", "{model}", "-o", "{out}"), "truncate"),
    Case("manifest-replace", "small", ("manifest", "{model}", "-o", "{out}"), "replace"),
    Case("manifest-rewrite", "small", ("manifest", "{model}", "-o", "{out}"), "rewrite"),
    Case("verify-manifest-truncate", "small", ("verify", "{model}", "--manifest", "{manifest}"), "truncate"),
    Case("verify-manifest-replace", "small", ("verify", "{model}", "--manifest", "{manifest}"), "replace"),
    Case("verify-manifest-rewrite", "small", ("verify", "{model}", "--manifest", "{manifest}"), "rewrite"),
    Case("verify-sums-truncate", "small", ("verify", "--sums", "{sums}"), "truncate"),
    Case("verify-sums-replace", "small", ("verify", "--sums", "{sums}"), "replace"),
    Case("verify-blob-truncate", "small", ("verify", "{blob}"), "truncate", n=1, target_is_blob=True),
    Case("verify-blob-rewrite", "small", ("verify", "{blob}"), "rewrite", n=1, target_is_blob=True),
    Case("rows-all-buffered-truncate", "small", ("rows", "{model}", "--all", "--modes", "buffered"), "truncate"),
    Case("rows-all-direct-truncate", "small", ("rows", "{model}", "--all", "--modes", "direct"), "truncate"),
    Case("rows-all-mmap-truncate", "small", ("rows", "{model}", "--all", "--modes", "mmap"), "truncate", "map", 1),
    Case("rows-all-mmap-truncate-before-map", "small", ("rows", "{model}", "--all", "--modes", "mmap"), "truncate",
         "premap", 1),
    Case("rows-all-replace", "small", ("rows", "{model}", "--all"), "replace"),
]


def _drive(action: str, when: str, n: int, target: Path, marker: Path, args: list[str]
           ) -> subprocess.CompletedProcess[str]:
    """Run the driver in a forked child (no interpreter start-up: the modules are already imported),
    with its stdout and stderr in files; a child killed by a signal shows as a negative returncode."""
    out, err = target.parent / "driver.stdout", target.parent / "driver.stderr"
    argv = [action, when, str(n), str(target), str(marker), "--", *args]
    pid = os.fork()
    if pid == 0:   # the child: never returns into pytest
        code = 70
        try:
            with open(out, "w") as sys.stdout, open(err, "w") as sys.stderr:
                try:
                    code = changing_driver.main(argv)
                except BaseException:   # shown to the test as stderr, with exit 70
                    traceback.print_exc()
        finally:
            os._exit(code)
    deadline = time.monotonic() + 180
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"ggaudit {args[0]} hung while its file changed")
        time.sleep(0.01)
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    return subprocess.CompletedProcess(argv, code, out.read_text(), err.read_text())


@functools.cache
def _sha256(source: Path) -> str:
    return hashlib.sha256(source.read_bytes()).hexdigest()


def _setup(case: Case, sources: dict[str, Path], tmp_path: Path) -> tuple[Path, list[str]]:
    model = Path(shutil.copy(sources[case.model], tmp_path / "model.gguf"))
    manifest = tmp_path / "model.manifest.json"
    if "{manifest}" in case.command:
        assert run_cli(["manifest", model, "-o", manifest]).exit_code == 0
    digest = _sha256(sources[case.model])        # the copy's, hashed once a source
    sums = tmp_path / "SHA256SUMS"
    sums.write_text(f"{digest}  model.gguf\n")
    blob = tmp_path / f"sha256-{digest}"
    if case.target_is_blob:
        os.link(model, blob)
    fill = {"{model}": str(model), "{manifest}": str(manifest), "{sums}": str(sums), "{blob}": str(blob),
            "{out}": str(tmp_path / "out.json")}
    return (blob if case.target_is_blob else model), [fill.get(a, a) for a in case.command]


@needs_fork
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_file_changed_mid_run_is_exit_2_with_one_clear_line(case: Case, sources: dict[str, Path],
                                                            tmp_path: Path) -> None:
    target, args = _setup(case, sources, tmp_path)
    marker = tmp_path / "changed"
    proc = _drive(case.action, case.when, case.n, target, marker, args)
    assert proc.returncode != -signal.SIGBUS, "killed by SIGBUS"
    assert marker.exists(), f"the change never happened: {proc.returncode} {proc.stdout[-500:]} {proc.stderr}"
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ggaudit: error: "), proc.stderr
    assert str(target) in lines[0], lines[0]
    assert any(word in lines[0] for word in ("changed", "shrank", "ended early", "ends before", "truncated")), lines[0]
    assert not (tmp_path / "out.json").exists(), "a manifest of a changing file was written"


@needs_fork
@pytest.mark.parametrize("command", [("scan", "{model}"), ("rows", "{model}", "--all"),
                                     ("verify", "{model}", "--manifest", "{manifest}")])
def test_the_driver_itself_changes_nothing_when_told_not_to(command: tuple[str, ...], sources: dict[str, Path],
                                                            tmp_path: Path) -> None:
    """Control: the wrapped reads alone leave a clean run clean (exit 0)."""
    target, args = _setup(Case("control", "small", command, "none"), sources, tmp_path)
    proc = _drive("none", "read", 1, target, tmp_path / "changed", args)
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr)


#: (id, command, when, n, the `when` of the message): the file rewritten in place with its size kept and its
#: mtime put back, so only its ctime tells. check: between its passes (just before the mmap pass maps it, the
#: buffered pass done and found unchanged) and between opening it and its one pass; verify: while hashing;
#: scan and rows --all: at their first read after the header.
KEPT_MTIME = [
    ("check-between-passes", ("check", "{model}", "--modes", "buffered,mmap"), "premap", 1,
     "while it was read (mmap)"),
    ("check-before-its-pass", ("check", "{model}", "--modes", "buffered"), "read", 2, "while it was read (buffered)"),
    ("verify-blob", ("verify", "{blob}"), "read", 1, "while it was being hashed"),
    ("verify-sums", ("verify", "--sums", "{sums}"), "read", 1, "while it was being hashed"),
    ("scan", ("scan", "{model}"), "read", 2, "during scan"),
    ("rows-all", ("rows", "{model}", "--all", "--modes", "buffered"), "read", 2, "while rows were read"),
]


#: Windows' st_ctime is the creation time, which setting the times can move: the identity leaves it out there.
needs_posix_ctime = pytest.mark.skipif(sys.platform == "win32", reason="Windows keeps no inode change time "
                                                                        "(st_ctime is the creation time)")


@needs_fork
@pytest.mark.parametrize(("command", "when", "n", "said"), [c[1:] for c in KEPT_MTIME], ids=[c[0] for c in KEPT_MTIME])
def test_a_same_size_rewrite_with_its_mtime_put_back_is_told_by_its_ctime(
        command: tuple[str, ...], when: str, n: int, said: str, sources: dict[str, Path], tmp_path: Path) -> None:
    """Size, device, inode and mtime all as they were: without the ctime the changed bytes would be blamed on a
    read path (check) or reported as a digest mismatch (verify). The one line names what changed, and only that."""
    case = Case("kept-mtime", "small", command, "rewrite-keep-mtime", when, n, target_is_blob="{blob}" in command)
    target, args = _setup(case, sources, tmp_path)
    before = os.stat(target)
    proc = _drive(case.action, when, n, target, tmp_path / "changed", args)
    after = os.stat(target)
    assert (tmp_path / "changed").exists(), (proc.returncode, proc.stdout[-500:], proc.stderr)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)
    assert after.st_ctime_ns != before.st_ctime_ns
    assert (proc.returncode, proc.stderr) == (2, f"ggaudit: error: {target}: file changed {said} (replaced, resized "
                                                 f"or rewritten: ctime {before.st_ctime_ns} -> {after.st_ctime_ns})\n")


@needs_posix_ctime
def test_the_identity_holds_the_ctime_and_its_message_names_only_what_changed(tmp_path: Path) -> None:
    from ggaudit.errors import ReadError
    from ggaudit.io.identity import FileIdentity

    path = tmp_path / "f.bin"
    path.write_bytes(b"a" * 100)
    st = os.stat(path)
    identity = FileIdentity.of(st)
    assert (identity.size, identity.mtime_ns, identity.ctime_ns) == (100, st.st_mtime_ns, st.st_ctime_ns)
    identity.check(path, "while read")                 # unchanged: nothing raised
    assert identity.changes(identity) == []
    other = FileIdentity(identity.device + 1, identity.inode + 1, 99, identity.mtime_ns + 1, identity.ctime_ns + 1)
    assert identity.changes(other) == [
        f"device {identity.device} -> {identity.device + 1}", f"inode {identity.inode} -> {identity.inode + 1}",
        "size 100 -> 99", f"mtime {identity.mtime_ns} -> {identity.mtime_ns + 1}",
        f"ctime {identity.ctime_ns} -> {identity.ctime_ns + 1}"]
    time.sleep(0.01)                                   # past a coarse filesystem clock's tick
    with open(path, "r+b") as f:
        f.write(b"b")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    now = os.stat(path)
    with pytest.raises(ReadError) as err:
        identity.check(path, "while read")
    assert str(err.value) == (f"{path}: file changed while read (replaced, resized or rewritten: ctime "
                              f"{st.st_ctime_ns} -> {now.st_ctime_ns})")
