"""`ggaudit rows` when a read fails after (or around) the replay (issue 26, item 5): the far search, the NaN
and Inf test, a tensor manifest's row group and the classifier read the file through the buffered reference
too. A read of theirs that fails is a `read-error` finding of its stage, the work goes on with what it could
read, the findings already made stay, and the run ends with exit 1.

Two fault layers below the process (tests/faultlayer.c; fault_support.below): one corrupts the direct path's
read of a row (the mismatch), the other fails with EIO only the buffered reads of that row at least
``min_length`` bytes long, so the replay's row-sized reference reads succeed and only the later, larger read
fails. The table is a Q8_0 table of 8000 rows of 170 bytes (larger than the 1 MiB the header parse reads, so
the faulted rows are read only by the replay and what follows it).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from gguf import GGMLQuantizationType as T

from ggaudit.evidence.readers import WINDOW_64K
from ggaudit.verify.manifests.tensor import build_tensor_manifest, read_tensor_manifest, write_tensor_manifest
from fault_support import below, faulted_env, picked, rows, run_ggaudit
from platforms import needs_linux
from rows_support import Table, make_table

pytestmark = needs_linux

ROW, FAR = 7000, 7400           # the direct path delivers row FAR's bytes for row ROW: 68000 bytes away
IDS = f"10,{ROW},7900"


@pytest.fixture
def table(ddir: Path) -> Table:
    return make_table(ddir, T.Q8_0, 160, 8000)


def _failures(report: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [picked(f, "mode", "stage", "offset", "length", "error") for f in report["read_errors"]]


def _mismatches(report: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [picked(m, "kind", "mode", "stage", "row", "other_row", "reference") for m in report["mismatches"]]


def _far_row(table: Table) -> dict[str, str]:
    """The direct path's read of ROW delivers FAR's bytes (further than the classifier's 64 KiB window)."""
    rb = table.tensor.row_bytes
    assert (FAR - ROW) * rb > WINDOW_64K
    return faulted_env(table.path, "direct", "shift", offset=table.offset(ROW), length=rb, shift=(FAR - ROW) * rb)


def _zeroed(table: Table, row: int) -> dict[str, str]:
    """The direct path's read of *row* delivers the 512-byte sector holding its start as zeros (``filled``:
    no read of the file around it, no far search)."""
    start = table.offset(row)
    return faulted_env(table.path, "direct", "zero", offset=start - start % 512, length=512)


def _window(table: Table) -> tuple[int, int]:
    """The classifier's read of the file around ROW: 64 KiB either side (ggaudit.rows.classify._source)."""
    here = table.offset(ROW)
    lo = here - WINDOW_64K
    return lo, here + table.tensor.row_bytes + WINDOW_64K - lo


def test_a_failing_far_search_leaves_the_row_garbage_and_the_run_goes_on(table: Table) -> None:
    rb, size = table.tensor.row_bytes, os.path.getsize(table.path)
    # Only reads longer than the classifier's window fail: the far search's reads of the table and the file.
    env = below(_far_row(table), "buffered", "eio", offset=table.offset(ROW), min_length=_window(table)[1] + 1)
    code, report = rows(table.path, env, "--ids", IDS, "--modes", "mmap,direct")
    assert code == 1
    assert _failures(report) == [("buffered", "far-search", table.offset(0), 8000 * rb, "EIO"),
                                 ("buffered", "far-search", 0, size, "EIO")]
    assert _mismatches(report) == [("garbage", "direct", "gather", ROW, None, "buffered")]
    assert (report["finite_tested"], report["finite_untested"], report["rows_checked"]) == (3, 0, 3)


def test_a_failing_read_around_the_row_is_a_classify_error_and_the_far_search_still_names_it(table: Table) -> None:
    lo, length = _window(table)
    # The first read of ROW as long as the classifier's window fails; the far search's read after it does not.
    env = below(_far_row(table), "buffered", "eio", offset=table.offset(ROW), min_length=length, times=1)
    code, report = rows(table.path, env, "--ids", IDS, "--modes", "mmap,direct")
    assert code == 1
    assert _failures(report) == [("buffered", "classify", lo, length, "EIO")]
    assert _mismatches(report) == [("misplaced", "direct", "gather", ROW, FAR, "buffered")]


def test_a_failing_nan_test_read_leaves_its_rows_untested_and_says_so(table: Table) -> None:
    rb = table.tensor.row_bytes
    # The replay reads rows 7000-7099 in batches of 50; the NaN test reads them in one run of 100 rows.
    env = below(_zeroed(table, 10), "buffered", "eio", offset=table.offset(ROW + 50), min_length=100 * rb)
    args = ("--ids", f"10,{ROW}-{ROW + 99}", "--modes", "mmap,direct", "--batch", "50")
    code, report = rows(table.path, env, *args)
    assert code == 1
    assert _failures(report) == [("buffered", "nonfinite", table.offset(ROW), 100 * rb, "EIO")]
    assert _mismatches(report) == [("filled", "direct", "gather", 10, None, "buffered")]
    assert (report["finite_tested"], report["finite_untested"], report["nonfinite_rows"]) == (1, 100, 0)


def test_the_text_says_how_many_rows_were_not_tested_for_nan(table: Table) -> None:
    rb = table.tensor.row_bytes
    env = faulted_env(table.path, "buffered", "eio", offset=table.offset(ROW + 50), min_length=100 * rb)
    page = Path(table.path).with_name("r.html")
    done = run_ggaudit(["rows", table.path, "--ids", f"10,{ROW}-{ROW + 99}", "--modes", "mmap,direct",
                        "--batch", "50", "-o", "-", "-o", str(page)], env)
    assert done.code == 1, done.stderr
    assert "<td>rows holding NaN/Inf</td><td>0 of 1 tested; 100 not tested (their reads failed)</td>" in \
        page.read_text(encoding="utf-8")
    result = done.stdout.splitlines()[-1]
    assert result.startswith("result: 0 mismatches (none), 0 short reads, 1 failed read;"), result
    assert result.endswith("; 1 row tested is finite in the file; 100 selected rows not tested for NaN/Inf (their "
                           "reads failed)"), result


def test_a_manifest_group_that_cannot_be_read_decides_nothing(table: Table, tmp_path: Path) -> None:
    manifest = tmp_path / "model.manifest.json"
    write_tensor_manifest(build_tensor_manifest(table.path), manifest)
    env = _zeroed(table, ROW)
    clean_code, clean = rows(table.path, env, "--ids", IDS, "--modes", "mmap,direct", "--manifest", str(manifest))
    group = _group_span(manifest, table)
    env = below(env, "buffered", "eio", offset=table.offset(ROW), min_length=group[1])
    code, report = rows(table.path, env, "--ids", IDS, "--modes", "mmap,direct", "--manifest", str(manifest))
    # Without the failure the manifest decides; with it agreement would, and nothing agrees: the reference stands.
    assert (clean_code, _mismatches(clean), clean["read_errors"]) == (
        1, [("filled", "direct", "gather", ROW, None, "manifest")], [])
    assert code == 1
    assert _failures(report) == [("buffered", "manifest", *group, "EIO")]
    assert _mismatches(report) == [("filled", "direct", "gather", ROW, None, "buffered")]
    assert (report["finite_tested"], report["finite_untested"]) == (3, 0)


def _group_span(manifest: Path, table: Table) -> tuple[int, int]:
    [entry] = read_tensor_manifest(manifest).tensors
    return entry.group_span(ROW // entry.rows_per_group)


def test_eintr_on_the_later_reads_is_retried(table: Table, tmp_path: Path) -> None:
    log = tmp_path / "faults.log"
    lo, length = _window(table)
    env = below(_far_row(table), "buffered", "eintr", offset=table.offset(ROW), min_length=length, times=3,
                log=log)
    code, report = rows(table.path, env, "--ids", IDS, "--modes", "mmap,direct")
    assert (code, report["read_errors"]) == (1, [])
    assert _mismatches(report) == [("misplaced", "direct", "gather", ROW, FAR, "buffered")]
    # The classifier's window read was interrupted three times and retried (PEP 475), then delivered.
    assert log.read_text().splitlines() == [f"buffered eintr {lo} {length}"] * 3
