"""`ggaudit rows` when a read fails on one path (issue 26, item 5): the fault layer (tests/faultlayer.c) fails
the reads of one row on one path with EIO, EAGAIN or EINTR. A failed read is a `read-error` finding for that
path (offset, length, errno) and the other reads and paths go on (exit 1); when no row could be compared at
all the run is exit 2; EINTR is retried and leaves no trace.

The table is built here, a Q8_0 table of 8000 rows of 170 bytes (more than the 1 MiB the header parser reads
at once, so the faulted row is read by the replay, not by the header parse). Each child process runs several
`ggaudit rows` commands under one fault setting (see _commands), so each setting costs one process start.
"""

from __future__ import annotations

import errno
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from gguf import GGMLQuantizationType as T

from ggaudit.rows import replay as R
from ggaudit.evidence.readers import Reader, open_reader
from fault_support import faulted_env, picked, run_python
from platforms import needs_linux
from rows_support import Table, Wrapped, make_table

FAULTED, OTHERS = 7000, (10, 7900)
IDS = "10,7000,7900"

#: Runs each command line given (a JSON list of argument lists) in this one process, under its fault setting.
CHILD = textwrap.dedent("""
    import contextlib, io, json, sys
    from ggaudit.cli import main
    done = []
    for args in json.loads(sys.argv[1]):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(args, prog_name="ggaudit")
                code = 0
            except SystemExit as end:
                code = end.code
        done.append([code, out.getvalue(), err.getvalue()])
    print(json.dumps(done))
""")


@pytest.fixture
def table(ddir: Path) -> Table:
    return make_table(ddir, T.Q8_0, 160, 8000)


def _commands(env: dict[str, str], *commands: list[str]) -> list[tuple[int, str, str]]:
    done = run_python(["-c", CHILD, json.dumps(commands)], env)
    assert done.code == 0 and not done.stderr.startswith("faultlayer:"), done.stderr
    return [tuple(one) for one in json.loads(done.stdout)]  # type: ignore[misc]


def _rows(path: str, modes: str, ids: str = IDS) -> list[str]:
    return ["rows", path, "--json", "--ids", ids, "--modes", modes]


def _report(out: str) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(out)["models"][0]
    return report


def _failure(mode: str, stage: str, offset: int, length: int, code: int) -> dict[str, Any]:
    return {"mode": mode, "stage": stage, "offset": offset, "length": length, "errno": code,
            "error": errno.errorcode[code]}


def _failures(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [{k: f[k] for k in ("mode", "stage", "offset", "length", "errno", "error")} for f in report["read_errors"]]


@needs_linux
def test_eio_on_the_page_cache_paths_is_a_read_error_per_path_and_the_other_rows_and_paths_go_on(
        table: Table) -> None:
    row, rb = table.offset(FAULTED), table.tensor.row_bytes
    env = faulted_env(table.path, "pagecache", "eio", offset=row)      # every read and copy of the row fails
    (code, out, err), (all_code, _, all_err) = _commands(env, _rows(table.path, "buffered,mmap,direct"),
                                                         _rows(table.path, "buffered,mmap", ids=str(FAULTED)))
    report = _report(out)
    # The reference read of row 7000 fails once for all paths; the buffered read and mmap's copy fail too.
    assert (code, report["mismatch_count"], report["nonfinite_rows"], report["read_error_count"]) == (1, 0, 0, 3), err
    assert _failures(report) == [_failure("buffered", "reference", row, rb, errno.EIO),
                                 _failure("buffered", "gather", row, rb, errno.EIO),
                                 _failure("mmap", "gather", row, rb, errno.EFAULT)]   # process_vm_readv's errno
    assert report["read_errors"][2]["message"] == f"mmap copy of {rb} bytes failed: Bad address"
    assert (report["ok"], report["delivered"]) == (False, False)
    # No row of the one faulted could be compared anywhere: nothing was checked, one line naming where.
    assert all_code == 2
    assert all_err == (f"ggaudit: error: {table.path}: offset {row}: every read failed (buffered, mmap; first: "
                       f"buffered read of {rb} bytes failed: Input/output error); no row was compared\n")


@needs_linux
def test_the_buffered_path_failing_on_a_row_leaves_mmap_and_direct_compared(table: Table) -> None:
    """Every buffered read of row 7000 fails (EIO), the reference read's too: the row's reference bytes come
    through a mapping instead, so mmap and direct are compared (exit 1, a finding), not "nothing checked"."""
    row, rb = table.offset(FAULTED), table.tensor.row_bytes
    env = faulted_env(table.path, "buffered", "eio", offset=row)
    [(code, out, err)] = _commands(env, _rows(table.path, "buffered,mmap,direct", ids=str(FAULTED)))
    report = _report(out)
    assert (code, report["mismatch_count"]) == (1, 0), err
    assert _failures(report)[:2] == [_failure("buffered", "reference", row, rb, errno.EIO),
                                     _failure("buffered", "gather", row, rb, errno.EIO)]
    assert picked(report, "compared", "uncompared", "ok") == (["mmap", "direct"], ["buffered"], False)


@needs_linux
def test_eagain_on_the_direct_path_is_its_read_error_and_the_text_says_so(table: Table) -> None:
    row, rb = table.offset(FAULTED), table.tensor.row_bytes
    with open_reader(table.path, "direct") as reader:
        start, length = reader.span(row, rb)
    env = faulted_env(table.path, "direct", "eagain", offset=row)
    (code, out, err), (text_code, text, _), (_, alone, _) = _commands(
        env, _rows(table.path, "buffered,mmap,direct"), ["rows", table.path, "--ids", IDS],
        _rows(table.path, "buffered,direct", ids=str(FAULTED)))
    report = _report(out)
    assert (code, report["mismatch_count"], _failures(report)) == (
        1, 0, [_failure("direct", "gather", start, length, errno.EAGAIN)]), err
    assert (report["compared"], report["uncompared"]) == (["buffered", "mmap", "direct"], [])
    # Only the faulted row: direct delivered none, so it compared nothing and is not said to have.
    assert picked(_report(alone), "compared", "uncompared", "ok") == (["buffered"], ["direct"], False)
    assert text_code == 1
    assert (f"read error: direct (gather) file {table.path}, offset {start} (0x{start:x}), {length} bytes: EAGAIN; "
            "that read's rows were not compared, the other reads went on") in text.splitlines()
    assert text.splitlines()[-1].startswith("result: 0 mismatches (none), 0 short reads, 1 failed read;")


@needs_linux
@pytest.mark.parametrize("path", ["mmap", "direct"])
def test_eintr_is_retried_on_each_path(table: Table, path: str, tmp_path: Path) -> None:
    """The buffered and direct reads are os.preadv, which Python retries (PEP 475); mmap's copy is
    process_vm_readv through ctypes, which ggaudit retries itself. The log shows the faults did fire."""
    log = tmp_path / "faults.log"
    row = table.offset(FAULTED)
    env = faulted_env(table.path, path, "eintr", offset=row, times=2, log=log)
    [(code, out, err)] = _commands(env, _rows(table.path, "buffered,mmap,direct"))
    report = _report(out)
    assert (code, report["ok"], report["read_errors"], report["rows_checked"]) == (0, True, [], 3), err
    assert len(log.read_text().splitlines()) == 2 and log.read_text().split()[:2] == [path, "eintr"]


class _FailingAt(Wrapped):
    """A real reader whose reads covering *offset* fail with EIO, as if the device failed them."""

    def __init__(self, inner: Reader, offset: int) -> None:
        super().__init__(inner)
        self.offset = offset

    def read_into(self, view: memoryview, offset: int) -> int:
        if offset <= self.offset < offset + len(view):
            raise self._failed(OSError(errno.EIO, "Input/output error"), offset, len(view))
        return self.inner.read_into(view, offset)


def test_a_failed_chunk_of_the_sweep_is_a_read_error_and_the_other_paths_sweep_on(tmp_path: Path) -> None:
    t = make_table(tmp_path, T.Q8_0, 160, 100)
    bad = t.offset(50)

    def factory(path: str, mode: str) -> Reader:
        reader = open_reader(path, mode)
        return _FailingAt(reader, bad) if mode == "mmap" else reader

    report = R.check_rows(t.path, modes=("buffered", "mmap"), select=R.RowSelection(all_rows=True),
                          options=R.RowsOptions(reader_factory=factory))
    start = t.offset(0)            # one chunk of the sweep holds the whole table: it fails whole
    assert [(f.mode, f.stage, f.offset, f.length, f.error) for f in report.read_errors] == [
        ("mmap", "sweep", start, 100 * 170, "EIO")]
    assert (report.mismatch_count, report.ok, [d.kind for d in report.diagnostics()]) == (0, False, ["rows/read-error"])

