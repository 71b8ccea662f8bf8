"""No orphan process, and Ctrl-C always works (issue 11, class 6): real ``ggaudit scan`` processes,
real signals, real worker processes.

The model is a 604 MB Q4_K tensor in a sparse file (nothing is written but the header), scanned with
``--deep`` so that two worker processes work on it for about five seconds: long enough to signal the
scan at several moments while its workers run. Workers are found as the children of the scan process
(``/proc/<pid>/stat``) before the signal and must be gone (or dead zombies) within 2 s after it; the
caller's ``communicate()`` must return, which it only does once every holder of the pipes is gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from multiprocessing.process import BaseProcess
from pathlib import Path
from collections.abc import Iterator

import pytest
from gguf import GGMLQuantizationType as T
from platforms import WINDOWS, needs_posix_signals

from ggaudit.format.build import encode_kv, encode_tensor_info

#: Rows of 4096 Q4_K columns: 2304 bytes a row, 604 MB in all, scanned with --workers 2.
ROWS = 262144
#: How long a scan may take to end after the signal, and its workers after it.
#: The promise is one second from Ctrl-C to exit; the bound gives a loaded 2-core CI machine (the suite
#: shares it with other processes) twice that, so that a failure means a wait that does not end, not noise.
PARENT_SECONDS, WORKERS_SECONDS, CTRL_C_SECONDS = 2.0, 2.0, 2.0

# Test-only switches, read in every process the scan starts (spawned workers too): run the portable
# parent watch alone (no PR_SET_PDEATHSIG), and start workers with spawn where fork is the default.
_SITECUSTOMIZE = textwrap.dedent("""\
    import os
    if os.environ.get("GGAUDIT_TEST_NO_PDEATHSIG"):
        import ggaudit.io.processes
        ggaudit.io.processes.die_with_parent = lambda parent_pid: None
    if os.environ.get("GGAUDIT_TEST_SPAWN"):
        import multiprocessing
        from ggaudit.scan import workers
        workers._pool_context = lambda: multiprocessing.get_context("spawn")
    """)


@pytest.fixture(scope="module")
def big_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("signals")
    path = folder / "big.gguf"
    header = (b"GGUF" + (3).to_bytes(4, "little") + (1).to_bytes(8, "little") + (1).to_bytes(8, "little")
              + encode_kv("general.architecture", "test") + encode_tensor_info("w", T.Q4_K, (4096, ROWS), 0))
    header += bytes(-len(header) % 32)
    with open(path, "wb") as f:
        f.write(header)
        f.truncate(len(header) + 4096 // 256 * 144 * ROWS)     # all-zero blocks: finite, and decoded
    (folder / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    yield path
    path.unlink()


def _start(model: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    environ = {**os.environ, **(env or {})}
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(model.parent), environ.get("PYTHONPATH")]))
    flags = ({"creationflags": getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)} if WINDOWS
             else {"start_new_session": True})
    return subprocess.Popen([sys.executable, "-m", "ggaudit", "scan", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=environ, **flags)  # type: ignore[call-overload]


# ----- processes, as the OS lists them -----------------------------------------------------------------

def _proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the name (state first), or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def _children_posix(pid: int) -> dict[int, str]:
    """The live children of ``pid``: {pid: start time}, the start time telling a reused pid apart."""
    out = {}
    for name in os.listdir("/proc"):
        fields = _proc_stat(int(name)) if name.isdigit() else None
        if fields is not None and int(fields[1]) == pid and fields[0] != "Z":
            out[int(name)] = fields[19]
    return out


def _alive_posix(pid: int, started: str) -> bool:
    fields = _proc_stat(pid)
    return fields is not None and fields[0] != "Z" and fields[19] == started


def _children_windows(pid: int) -> dict[int, str]:
    """The processes whose parent is ``pid`` (Toolhelp snapshot; a dead parent's children keep its id)."""
    import ctypes
    from ctypes import wintypes

    class PROCESSENTRY32W(ctypes.Structure):
        _fields_ = [("dwSize", wintypes.DWORD), ("cntUsage", wintypes.DWORD), ("th32ProcessID", wintypes.DWORD),
                    ("th32DefaultHeapID", ctypes.c_size_t), ("th32ModuleID", wintypes.DWORD),
                    ("cntThreads", wintypes.DWORD), ("th32ParentProcessID", wintypes.DWORD),
                    ("pcPriClassBase", ctypes.c_long), ("dwFlags", wintypes.DWORD),
                    ("szExeFile", ctypes.c_wchar * 260)]

    k = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]
    k.CreateToolhelp32Snapshot.restype = ctypes.c_void_p
    k.CreateToolhelp32Snapshot.argtypes = [wintypes.DWORD, wintypes.DWORD]
    k.Process32FirstW.argtypes = k.Process32NextW.argtypes = [ctypes.c_void_p, ctypes.POINTER(PROCESSENTRY32W)]
    k.CloseHandle.argtypes = [ctypes.c_void_p]
    snap = k.CreateToolhelp32Snapshot(0x2, 0)     # TH32CS_SNAPPROCESS
    entry = PROCESSENTRY32W()
    entry.dwSize = ctypes.sizeof(entry)
    out = {}
    try:
        more = k.Process32FirstW(snap, ctypes.byref(entry))
        while more:
            if entry.th32ParentProcessID == pid:
                out[entry.th32ProcessID] = entry.szExeFile
            more = k.Process32NextW(snap, ctypes.byref(entry))
    finally:
        k.CloseHandle(snap)
    return out


def _children(pid: int) -> dict[int, str]:
    return _children_windows(pid) if WINDOWS else _children_posix(pid)


def _alive(pid: int, started: str, parent: int) -> bool:
    return pid in _children_windows(parent) if WINDOWS else _alive_posix(pid, started)


def _workers_running(proc: subprocess.Popen[bytes], count: int, timeout: float = 60.0) -> dict[int, str]:
    """Wait until the scan has ``count`` children (its workers), and return them."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        kids = _children(proc.pid)
        if len(kids) >= count:
            return kids
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.01)
    proc.kill()
    pytest.fail(f"no {count} workers after {timeout} s: {proc.communicate()}")


def _assert_all_gone(kids: dict[int, str], parent: int) -> None:
    deadline = time.monotonic() + WORKERS_SECONDS
    while (alive := [pid for pid, started in kids.items() if _alive(pid, started, parent)]):
        assert time.monotonic() < deadline, f"workers {alive} outlived their parent by {WORKERS_SECONDS} s"
        time.sleep(0.01)


def _end(proc: subprocess.Popen[bytes], within: float, kids: dict[int, str]) -> tuple[bytes, bytes, float]:
    """communicate() with the scan, which must return within ``within`` s: every pipe holder is gone."""
    t0 = time.monotonic()
    try:
        out, err = proc.communicate(timeout=within + 3)
    except subprocess.TimeoutExpired:
        # Orphaned workers would keep the pipes open and a second communicate() waiting forever.
        for pid, started in [(proc.pid, ""), *kids.items()]:
            if pid == proc.pid or _alive(pid, started, proc.pid):
                os.kill(pid, getattr(signal, "SIGKILL", signal.SIGTERM))
        pytest.fail(f"communicate() still waiting {within + 3} s after the signal (workers {list(kids)})")
    return out, err, time.monotonic() - t0


def _workers_expected() -> int:
    return 2        # --workers 2


# ----- the parent ends: its workers end with it --------------------------------------------------------

@needs_posix_signals
@pytest.mark.parametrize("signum", [signal.SIGTERM, getattr(signal, "SIGHUP", 1), getattr(signal, "SIGKILL", 9)],
                         ids=["SIGTERM", "SIGHUP", "SIGKILL"])
def test_signal_to_the_scan_ends_it_and_its_workers(big_model: Path, signum: int) -> None:
    # At several moments: as the workers start, while they scan, and later in the scan.
    for delay in (0.0, 0.3, 0.8):
        proc = _start(big_model, str(big_model), "--deep", "--workers", "2")
        kids = _workers_running(proc, _workers_expected())
        time.sleep(delay)
        os.kill(proc.pid, signum)
        _, err, took = _end(proc, PARENT_SECONDS, kids)
        # SIGTERM and SIGHUP end the scan by that same signal (a shell shows 128+n: 143, 129), as
        # SIGKILL does: no traceback, nothing on stderr.
        assert (proc.returncode, err, took < PARENT_SECONDS) == (-signum, b"", True), (delay, err)
        _assert_all_gone(kids, proc.pid)


@needs_posix_signals
@pytest.mark.parametrize("signum", [signal.SIGTERM, getattr(signal, "SIGHUP", 1)], ids=["SIGTERM", "SIGHUP"])
def test_a_signal_leaves_no_leaked_semaphore_warning(big_model: Path, signum: int) -> None:
    """With spawn workers (macOS's default, and forkserver's, Python 3.14's on Linux), the pool's queues
    hold named semaphores that multiprocessing's resource tracker watches. A scan ended by SIGTERM or SIGHUP
    re-raises the signal, which runs no finalizer: the tracker, which outlives the scan and shares its
    stderr, then printed "resource_tracker: There appear to be 5 leaked semaphore objects"."""
    proc = _start(big_model, str(big_model), "--deep", "--workers", "2", env={"GGAUDIT_TEST_SPAWN": "1"})
    kids = _workers_running(proc, _workers_expected())
    time.sleep(0.3)
    os.kill(proc.pid, signum)
    _, err, _ = _end(proc, PARENT_SECONDS, kids)     # returns once the tracker, holding stderr too, is gone
    assert b"resource_tracker" not in err and b"leaked" not in err, err.decode()
    assert (proc.returncode, err) == (-signum, b"")
    _assert_all_gone(kids, proc.pid)


@needs_posix_signals
@pytest.mark.parametrize("spawn", [False, True], ids=["fork", "spawn"])
def test_the_parent_watch_alone_ends_orphaned_workers(big_model: Path, spawn: bool) -> None:
    """Without Linux's PR_SET_PDEATHSIG, as on macOS and Windows: each worker's watch of its parent's
    sentinel ends it. SIGKILL leaves the parent no chance to kill its workers itself."""
    env = {"GGAUDIT_TEST_NO_PDEATHSIG": "1", **({"GGAUDIT_TEST_SPAWN": "1"} if spawn else {})}
    for delay in (0.0, 0.5):
        proc = _start(big_model, str(big_model), "--deep", "--workers", "2", env=env)
        kids = _workers_running(proc, _workers_expected())
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        _, _, took = _end(proc, PARENT_SECONDS, kids)
        assert (proc.returncode, took < PARENT_SECONDS) == (-signal.SIGKILL, True)
        _assert_all_gone(kids, proc.pid)


def test_killed_scan_leaves_no_worker_on_any_os(big_model: Path) -> None:
    """``Popen.kill()``: SIGKILL on POSIX, TerminateProcess on Windows; no handler runs in the parent."""
    if not WINDOWS and not os.path.isdir("/proc/self/task"):
        pytest.skip("lists child processes through /proc or the Windows Toolhelp API")
    proc = _start(big_model, str(big_model), "--deep", "--workers", "2")
    kids = _workers_running(proc, _workers_expected())
    time.sleep(0.2)
    proc.kill()
    _end(proc, PARENT_SECONDS, kids)
    assert proc.returncode != 0
    _assert_all_gone(kids, proc.pid)


# ----- Ctrl-C: SIGINT to the whole process group --------------------------------------------------------

def _ctrl_c(proc: subprocess.Popen[bytes], kids: dict[int, str]) -> None:
    os.killpg(proc.pid, signal.SIGINT)
    _, err, took = _end(proc, CTRL_C_SECONDS, kids)
    assert (proc.returncode, err.decode(), took < CTRL_C_SECONDS) == (130, "ggaudit: interrupted\n", True), \
        (proc.returncode, err.decode()[-2000:], took)
    _assert_all_gone(kids, proc.pid)


@needs_posix_signals
@pytest.mark.parametrize("spawn", [False, True], ids=["fork", "spawn"])
def test_ctrl_c_ends_a_scan_with_workers_in_130(big_model: Path, spawn: bool) -> None:
    """Exit 130 and the one line, within a second, no worker left and no worker's traceback; at
    several moments, the first while the workers are still starting (the deadlock was intermittent)."""
    env = {"GGAUDIT_TEST_SPAWN": "1"} if spawn else {}
    for delay in (0.0, 0.05, 0.2, 0.5, 1.0):
        proc = _start(big_model, str(big_model), "--deep", "--workers", "2", env=env)
        kids = _workers_running(proc, 1 if delay == 0 else _workers_expected())
        time.sleep(delay)
        _ctrl_c(proc, kids if delay else _children(proc.pid))


@needs_posix_signals
def test_ctrl_c_ends_several_models_scanned_at_once(big_model: Path) -> None:
    """``scan A A --jobs 2``: two threads each scanning a model; Ctrl-C ends it all the same."""
    for delay in (0.0, 0.3, 0.8):
        proc = _start(big_model, str(big_model), str(big_model), "--jobs", "2", "--deep")
        deadline = time.monotonic() + 60
        while len(os.listdir(f"/proc/{proc.pid}/task")) < 3:      # the main thread and two jobs
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
            time.sleep(0.01)
        time.sleep(delay)
        _ctrl_c(proc, {})


@needs_posix_signals
def test_ctrl_c_while_starting_ends_in_130(big_model: Path) -> None:
    """Ctrl-C in the first moments, while the command line's modules are still importing: exit 130 and the
    one line, never a traceback. (Earlier still, while Python itself starts (its ``site`` module, the
    ``.pth`` files of site-packages, ``runpy`` finding ``-m ggaudit``), the interpreter reports the
    interrupt its own way before any ggaudit code runs: not counted.)"""
    interrupted = 0
    # Dense steps: a warm start imports the command line in a few tens of milliseconds, a window coarse steps
    # can miss on a fast machine (or land only in Python's own start, which is not counted).
    for delay in (0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08, 0.09, 0.1, 0.12, 0.15, 0.2, 0.25, 0.3):
        proc = _start(big_model, "--help")
        time.sleep(delay)
        os.killpg(proc.pid, signal.SIGINT)
        out, err, _ = _end(proc, CTRL_C_SECONDS, {})
        if proc.returncode == 0:        # --help finished before the signal arrived
            assert b"Usage:" in out, delay
        elif (proc.returncode, err) == (-signal.SIGINT, b""):
            pass        # during interpreter shutdown, once the handler is gone: killed by SIGINT (a shell's 130)
        elif not any(mark in err for mark in (b"init_import_site", b"<frozen site>", b"runpy")):
            assert (proc.returncode, err.decode()) == (130, "ggaudit: interrupted\n"), (delay, err[-2000:])
            interrupted += 1
    assert interrupted, "no Ctrl-C landed while ggaudit was starting"


@pytest.mark.skipif(WINDOWS, reason="the lane's embeddable Python runs -m only on the paths of its ._pth file")
def test_ctrl_c_that_escaped_an_exec_still_ends_in_130(tmp_path: Path) -> None:
    """A Ctrl-C that passed through an ``exec()`` of a string before the command line caught it (dataclasses
    compile their methods that way while a module imports) is exit 130 too: CPython 3.11 remembers it as
    unhandled and, left alone, ends the process by SIGINT after teardown."""
    script = textwrap.dedent("""\
        import ggaudit.__main__ as entry
        import ggaudit.cli as cli
        from ggaudit.cli.common import guarded
        cli.main = lambda **_: guarded(lambda: exec("raise KeyboardInterrupt"))
        entry.run()
        """)
    (tmp_path / "entry_under_test.py").write_text(script)
    # With -m, as the console script and ``python -m ggaudit`` run (``-c`` exits inside PyErr_Print instead);
    # found in the working folder, which -m puts first on sys.path.
    proc = subprocess.run([sys.executable, "-m", "entry_under_test"], capture_output=True, timeout=60, cwd=tmp_path)
    assert (proc.returncode, proc.stdout, proc.stderr.decode()) == (130, b"", "ggaudit: interrupted\n")


def _wait_for_exit(process: BaseProcess, seconds: float) -> None:
    """Wait until ``process`` has an exit code. Not ``join``: the pool's manager thread reaps a killed
    worker too, and when it wins that race ``join`` returns with the exit code still unset."""
    deadline = time.monotonic() + seconds
    while process.exitcode is None and time.monotonic() < deadline:
        time.sleep(0.01)


@needs_posix_signals
def test_a_ctrl_c_while_submitting_kills_the_workers_only_after_the_submit() -> None:
    # The pool may be adding a worker to its table of processes while the submit runs, and its manager
    # thread walks that table once a killed worker is seen: the kill waits for the submit to end.
    from concurrent.futures import ProcessPoolExecutor

    from ggaudit.scan import workers

    pool = ProcessPoolExecutor(1)
    try:
        pool.submit(time.sleep, 30)
        (process,) = pool._processes.values()          # the executor's own table: no public one
        with pytest.raises(KeyboardInterrupt), workers._StopOnSignals(pool) as guard:
            with guard.submitting():
                guard._on_signal(signal.SIGINT, None)
                assert guard.interrupted and process.is_alive()
            _wait_for_exit(process, 5)
            assert process.exitcode == -signal.SIGKILL
            guard.check()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
