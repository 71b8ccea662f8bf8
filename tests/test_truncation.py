"""Truncation sweep (issue 6): every model cut at every header byte and at every tensor boundary.

Opening (and so scanning) a cut file must raise FormatError at the offset of the field the cut falls
in, as an independent walk of the intact header says; the CLI gives exit 2 and one error line.
"""

from __future__ import annotations

import itertools
import os
import shutil
from pathlib import Path

import pytest

from ggaudit.errors import FormatError
from ggaudit.format.layout import open_gguf, open_model
from ggaudit.scan.run import scan

from platforms import WINDOWS
from support import (MIN_KV, MIN_TENSOR_INFO, HeaderMap, acceptable_cut_offsets, assert_one_line_error,
                     fixture_files, run_cli, walk_header, write_rich_model, write_small_model, write_split_set)


def _models(folder: Path) -> list[Path]:
    """The bundled fixtures, plus models built here: a header with every value type, a small model, a split set."""
    built = [write_rich_model(folder / "rich.gguf"), write_small_model(folder / "small.gguf"),
             *write_split_set(folder)]
    return fixture_files() + built


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return _models(tmp_path_factory.mktemp("trunc-models"))


def _open_and_scan(path: Path) -> None:
    """What `scan` does: open the whole model, then scan it."""
    scan(open_model(path))


#: Elements kept at each end of an array's run of elements when the Windows lane samples the header's cuts.
_ARRAY_ENDS = 3


def _field_cuts(hmap: HeaderMap) -> list[int]:
    """Cuts at and beside every field boundary (a string's also at its length/bytes seam), on each side of
    every length, count and header count's promise; inside an array, those of its first and last few
    elements: the cuts where what the parser must blame changes."""
    kept = []
    for guards, run in itertools.groupby(hmap.leaves, key=lambda leaf: leaf.guards):
        elements = list(run)
        whole = not guards or len(elements) <= 2 * _ARRAY_ENDS      # a top-level field, or a short array
        kept += elements if whole else elements[:_ARRAY_ENDS] + elements[-_ARRAY_ENDS:]
    cuts = {c for leaf in kept for c in (leaf.start - 1, leaf.start, leaf.start + 1)}
    cuts |= {c for leaf in kept if leaf.kind == "length" for c in (leaf.start + 7, leaf.start + 8)}
    promises = {promised for leaf in hmap.leaves for _, promised in leaf.guards}
    promises |= {24 + hmap.n_tensors * MIN_TENSOR_INFO, hmap.meta_end + hmap.n_tensors * MIN_TENSOR_INFO,
                 24 + hmap.n_kv * MIN_KV}
    cuts |= {c for promised in promises for c in (promised - 1, promised)}
    return sorted(c for c in cuts if 0 <= c < hmap.header_end)


def _header_cuts(hmap: HeaderMap) -> list[int]:
    """Every header byte, longest cut first. On Windows only the field cuts above (3k, not 25.6k): under Wine
    a cut's truncate, open, stat and read cost about 1 ms, 12x Linux (24 s for the sweep). What differs there,
    opening and reading the file, every cut still does, in every section and field kind; the parse of what
    was read is the same Python on both, and Linux sweeps it byte by byte."""
    cuts = _field_cuts(hmap) if WINDOWS else range(hmap.header_end)
    return sorted(cuts, reverse=True)


def test_every_header_byte_cut_is_reported_at_the_field_it_falls_in(models: list[Path],
                                                                      tmp_path: Path) -> None:
    checked = 0
    swept: set[bytes] = set()
    for source in models:
        data = source.read_bytes()
        hmap = walk_header(data)
        if data[:hmap.header_end] in swept:     # the faulty fixtures share their clean twin's header
            continue
        swept.add(data[:hmap.header_end])
        cut_file = tmp_path / f"cut-{source.name}"
        cut_file.write_bytes(data[:hmap.header_end])
        # Shrink one file in place, from the longest cut down: cheap, and every size gets opened.
        for cut in _header_cuts(hmap):
            os.truncate(cut_file, cut)
            with pytest.raises(FormatError) as caught:
                open_gguf(cut_file)
            err = caught.value
            allowed, section = acceptable_cut_offsets(hmap, cut)
            assert err.offset in allowed, (source.name, cut, str(err), sorted(allowed))
            assert err.offset <= cut, (source.name, cut, str(err))
            assert err.path == str(cut_file)
            assert err.field, str(err)
            if section in ("metadata", "tensor") and err.offset not in (8, 16):
                assert err.field.startswith(f"{section}["), (cut, str(err))
            checked += 1
    assert checked > 1000


def test_every_tensor_boundary_cut_names_the_tensor_offset_field(models: list[Path], tmp_path: Path) -> None:
    checked = 0
    for source in models:
        data = source.read_bytes()
        hmap = walk_header(data)
        ends = sorted({end for _, _, end in hmap.tensor_offset_fields})
        starts = sorted({t.offset for t in open_gguf(source).tensors})
        cuts = {c for s in starts for c in (s, s + 1)} | {c for e in ends for c in (e - 1,)}
        cuts |= set(range(hmap.header_end, hmap.data_offset))      # the padding before the data section
        cuts = sorted(c for c in cuts if hmap.header_end <= c < len(data))
        cut_file = tmp_path / f"cut-{source.name}"
        shutil.copyfile(source, cut_file)
        for cut in reversed(cuts):
            os.truncate(cut_file, cut)
            first_past = next((name, at) for name, at, end in hmap.tensor_offset_fields if end > cut)
            with pytest.raises(FormatError) as caught:
                open_gguf(cut_file)
            err = caught.value
            assert (err.offset, err.field) == (first_past[1], f"tensor[{first_past[0]}].offset"), (cut, str(err))
            assert "past the end of the file" in err.message
            checked += 1
    assert checked > 50


def test_cut_files_fail_scan_with_format_error(models: list[Path], tmp_path: Path) -> None:
    """The library path `scan` takes: a cut model never gets as far as reading tensor data."""
    for source in models:
        data = source.read_bytes()
        hmap = walk_header(data)
        for cut in (0, 3, 23, hmap.meta_end - 1, hmap.header_end - 1, hmap.data_offset, len(data) - 1):
            if cut < 0:
                continue
            path = tmp_path / f"scan-{cut}-{source.name}"
            path.write_bytes(data[:cut])
            with pytest.raises(FormatError):
                _open_and_scan(path)


@pytest.mark.parametrize("command", ["info", "scan"])
def test_cli_reports_a_cut_file_in_one_line_with_exit_2(command: str, models: list[Path],
                                                       tmp_path: Path) -> None:
    source = next(m for m in models if m.name == "rich.gguf")
    data = source.read_bytes()
    hmap = walk_header(data)
    for cut in (0, 2, 12, 30, hmap.meta_end + 3, hmap.header_end, len(data) - 1):
        path = tmp_path / f"cli-{cut}.gguf"
        path.write_bytes(data[:cut])
        line = assert_one_line_error(run_cli([command, path]), str(path), "offset ")
        if cut >= hmap.header_end:
            assert ".offset: tensor data" in line


def test_cli_names_the_cut_shard_of_a_split_set(tmp_path: Path) -> None:
    first, second = write_split_set(tmp_path)
    size = second.stat().st_size
    os.truncate(second, size - 1)
    result = run_cli(["info", first])
    assert_one_line_error(result, str(second), "past the end of the file")
