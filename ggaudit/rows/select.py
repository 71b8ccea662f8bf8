"""What `ggaudit rows` checks: the selected row IDs (--ids, --ids-file, --random, --page-crossing, --all)
and an engine's capture of gathered rows (--against), validated before any read path runs."""

from __future__ import annotations

import io
import os
import struct
import tokenize
import warnings
import zipfile
import zlib
from array import array
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO, Iterable, Iterator, Sequence, Union

import numpy as np

from .. import io as fileio
from ..errors import ReadError, UsageError
from ..arrays import distinct
from ..untrusted import quote, shorten
from .readers import PAGE

if TYPE_CHECKING:
    from .replay import RowTable

#: Selections larger than this must use --all (which streams) rather than a list of IDs.
MAX_SELECTED = 1 << 24

#: One --ids-file, or several (their IDs are joined).
IdsFiles = Union[str, "os.PathLike[str]", Sequence[Union[str, "os.PathLike[str]"]]]

#: Largest --ids-file read: a list of IDs or ranges, never model-sized.
MAX_IDS_FILE_BYTES = 64 << 20


# --- row selection -------------------------------------------------------------------------------

def parse_ids(text: str, n_rows: int, source: str = "--ids") -> np.ndarray:
    """Row IDs (int64, in the order given) from "4162,4170-4200" (commas or whitespace; '#' starts a
    comment in files). Kept as 8-byte integers: 16M IDs are 128 MB, not 600 MB of Python ints."""
    ids = array("q")
    multiline = "\n" in text.rstrip("\n")
    for lineno, line in enumerate(io.StringIO(text), 1):  # line by line: no list of every line
        for token in line.split("#", 1)[0].replace(",", " ").split():
            span = _expand(token, n_rows, f"{source} line {lineno}" if multiline else source)
            if len(ids) + len(span) > MAX_SELECTED:
                raise UsageError(source, f"more than {MAX_SELECTED} row IDs; use --all to sweep the table")
            ids.extend(span)
    return np.frombuffer(ids, dtype=np.int64) if ids else np.zeros(0, dtype=np.int64)


def _expand(token: str, n_rows: int, where: str) -> range:
    lo_text, dash, hi_text = token.partition("-")
    try:
        lo = int(lo_text)
        hi = int(hi_text) if dash else lo
    except ValueError:
        raise UsageError(where, f"{quote(token)} is not a row ID or a range like 4170-4200") from None
    if lo < 0 or hi < lo:
        raise UsageError(where, f"{quote(token)} is not a valid range of row IDs")
    if hi >= n_rows:
        raise UsageError(where, f"row {shorten(str(hi))} is outside the table (rows 0..{n_rows - 1})")
    if hi - lo >= MAX_SELECTED:
        raise UsageError(where, f"{quote(token)} selects more than {MAX_SELECTED} rows; use --all")
    return range(lo, hi + 1)


def crosses(offset: int, length: int, boundary: int) -> bool:
    return offset // boundary != (offset + length - 1) // boundary


def crossing_mask(offsets: np.ndarray, length: int, boundary: int) -> np.ndarray:
    return offsets // boundary != (offsets + (length - 1)) // boundary


def crossing_rows(table: RowTable, boundary: int = PAGE) -> np.ndarray:
    """Every row of the table that straddles a multiple of *boundary* (in absolute file offsets)."""
    found: list[np.ndarray] = []
    total = 0
    for hit in crossing_rows_of(table.tensor.offset, table.row_bytes, table.n_rows, boundary):
        total += hit.size
        if total > MAX_SELECTED:
            raise UsageError(table.path, f"more than {MAX_SELECTED} rows cross a page; use --all",
                             field=table.name)
        found.append(hit)
    return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)


def crossing_rows_of(base: int, row_bytes: int, n_rows: int, boundary: int,
                     chunk: int = 1 << 20) -> Iterator[np.ndarray]:
    """The rows crossing a multiple of *boundary*, ascending, in pieces, found from the boundaries rather
    than the rows: a 54 GB table has 13M page boundaries but 600M rows.

    For each boundary B inside the table, the row holding byte B - 1 crosses B unless a row starts at
    B; a row longer than *boundary* crosses several and is given once.
    """
    end = base + n_rows * row_bytes
    first = (base // boundary + 1) * boundary  # the first boundary after the table's first byte
    count = (end - 1 - first) // boundary + 1 if first < end else 0
    last = -1
    for k in range(0, count, chunk):
        b = first + boundary * np.arange(k, min(count, k + chunk), dtype=np.int64)
        rows = (b[(b - base) % row_bytes != 0] - 1 - base) // row_bytes
        if not rows.size:
            continue
        new = np.empty(rows.size, dtype=bool)  # each row once, though it may cross several boundaries
        new[0] = rows[0] != last
        new[1:] = rows[1:] != rows[:-1]
        last = int(rows[-1])
        yield rows[new]


@dataclass(frozen=True)
class Selection:
    """The rows to replay (int64, each once, in first-chosen order; None for --all: the whole table,
    streamed) and how they were chosen."""

    rows: np.ndarray | None = field(compare=False)
    description: str
    seed: int | None = None


def select_rows(table: RowTable, *, ids: str | None = None, ids_file: IdsFiles | None = None,
                all_rows: bool = False, random: int | None = None, seed: int | None = None,
                page_crossing: bool = False, extra: Iterable[int] | np.ndarray = ()) -> Selection:
    """Combine the selectors (union, first appearance order); --all excludes the others. *ids_file* is
    one file or several (each read in turn). Selectors that name no row are an error: nothing would be
    checked."""
    chosen = [s for s, on in (("--ids", ids is not None), ("--ids-file", bool(id_files(ids_file))),
                              ("--random", random is not None), ("--page-crossing", page_crossing)) if on]
    if all_rows:
        if chosen:
            raise UsageError(None, f"--all sweeps the whole table; drop {', '.join(chosen)}")
        return Selection(None, f"all {table.n_rows} rows")
    picked = [np.asarray(extra if isinstance(extra, np.ndarray) else list(extra), dtype=np.int64)]
    parts = []
    if ids is not None:
        picked.append(parse_ids(ids, table.n_rows))
        parts.append(f"--ids {(ids if len(ids) <= 60 else ids[:57] + '...') or repr(ids)}")
    for name in id_files(ids_file):
        picked.append(parse_ids(_read_ids_file(name), table.n_rows, name))
        parts.append(f"--ids-file {name}")
    if random is not None:
        seed, sample = _random_rows(table, random, seed)
        picked.append(sample)
        parts.append(f"--random {random} --seed {seed}")
    if page_crossing:
        picked.append(crossing_rows(table))
        parts.append("--page-crossing")
    rows = _first_occurrences(np.concatenate(picked))
    if not rows.size and not parts:
        raise UsageError(None, "choose rows: --ids, --ids-file, --random N, --page-crossing or --all")
    if not rows.size:
        raise UsageError(None, f"no rows selected by {' + '.join(parts)}; nothing was checked")
    if rows.size > MAX_SELECTED:
        raise UsageError(None, f"{rows.size} rows selected, more than {MAX_SELECTED}; use --all to sweep the table")
    return Selection(rows, " + ".join(parts) or "capture IDs", seed)


def id_files(ids_file: IdsFiles | None) -> list[str]:
    """The --ids-file paths: none, one, or several (repeated --ids-file)."""
    if ids_file is None:
        return []
    if isinstance(ids_file, (str, os.PathLike)):
        return [os.fspath(ids_file)]
    return [os.fspath(name) for name in ids_file]


def _first_occurrences(rows: np.ndarray) -> np.ndarray:
    """Each row once, in the order it was first chosen (a dict of 13M Python ints took a gigabyte)."""
    if rows.size < 2 or bool((rows[1:] > rows[:-1]).all()):
        return rows  # ascending already (--page-crossing alone): nothing repeats, no sort needed
    order = np.argsort(rows, kind="stable")  # equal rows stay in the order they were chosen
    ranked = rows[order]
    first = np.ones(rows.size, dtype=bool)
    first[1:] = ranked[1:] != ranked[:-1]
    return rows[np.sort(order[first])]


def _read_ids_file(path: str) -> str:
    # Opened as every input is (ggaudit.io): regular files only, so a FIFO cannot hang the run nor a
    # device such as /dev/zero feed it without end.
    try:
        fd, st = fileio.open_readonly(path)
    except ReadError as err:
        raise UsageError(path, f"cannot read ID file: {err.message}") from None
    with open(fd, "rb") as f:
        if st.st_size > MAX_IDS_FILE_BYTES:
            raise UsageError(path, f"ID file is larger than {MAX_IDS_FILE_BYTES >> 20} MiB; use --all or ranges")
        data = f.read(st.st_size)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise UsageError(path, "ID file is not text", offset=err.start) from None


#: Largest --seed: seeds are 32-bit, as the ones chosen for you are (and as they are printed).
MAX_SEED = (1 << 32) - 1


def _random_rows(table: RowTable, n: int, seed: int | None) -> tuple[int, np.ndarray]:
    if n < 1 or n > min(table.n_rows, MAX_SELECTED):
        raise UsageError(None, f"--random {n}: choose 1..{min(table.n_rows, MAX_SELECTED)} rows")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED):
        # Not the value itself: a huge int cannot even be turned into text (Python's 4300-digit limit).
        raise UsageError(None, f"--seed must be an integer in 0..{MAX_SEED}")
    if seed is None:
        seed = int.from_bytes(os.urandom(4), "little")
    return seed, sample_rows(np.random.default_rng(seed), table.n_rows, n)


def sample_rows(rng: np.random.Generator, n_rows: int, n: int) -> np.ndarray:
    """*n* distinct rows of *n_rows*, uniformly, in random order, in memory that grows with *n* only.

    numpy's choice without replacement shuffles the whole population once *n* exceeds a fiftieth of it:
    16M rows of a 600M-row table took 4.8 GB. Above 16M rows, draw with replacement until *n* distinct
    rows are in hand (a few percent repeat), then keep a random *n* of them: every n-subset is as likely.
    """
    if n_rows <= MAX_SELECTED:
        return rng.choice(n_rows, size=n, replace=False).astype(np.int64)
    picked = np.zeros(0, dtype=np.int64)
    while picked.size < n:
        short = n - picked.size
        draw = rng.integers(0, n_rows, size=short + short * n // n_rows + 64, dtype=np.int64)
        picked = distinct(np.concatenate((picked, draw)))
    return rng.permutation(picked)[:n]


# --- engine captures -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Capture:
    path: str
    ids: np.ndarray
    data: np.ndarray
    kind: str  # raw | decoded


#: Largest array read from a .npz capture (numpy reads them whole; .npy captures are mapped instead).
MAX_NPZ_BYTES = 1 << 30


def load_capture(path: str, table: RowTable) -> Capture:
    """An engine's gathered rows: .npz with `ids` and one data array, or a structured .npy (ids, rows).

    Opened as every input is (ggaudit.io: regular files only, so a FIFO cannot hang the run nor a device
    feed it without end), size-capped, and parsed from that one descriptor: numpy never opens the path.
    Whatever is wrong with the bytes (a damaged zip, a bad CRC, a cut array, object or pickled data) is
    one UsageError naming the capture.
    """
    try:
        fd, st = fileio.open_readonly(path)
    except ReadError as err:
        raise UsageError(path, f"cannot read the capture: {err.message}") from None
    with open(fd, "rb") as f:
        limit = max_capture_bytes(table)
        if st.st_size > limit:
            raise UsageError(path, f"the capture is {st.st_size} bytes, more than {limit} (every row of "
                                   f"{MAX_SELECTED} could take)")
        try:
            with warnings.catch_warnings():
                # numpy warns (on stderr, raw) about a header in Python 2's syntax: the bytes are the
                # user's, the header parsed, and the warning would only break the one-line contract.
                warnings.simplefilter("ignore")
                ids, data = _capture_arrays(path, f, st.st_size)
        except _BAD_CAPTURE as err:
            raise UsageError(path, f"cannot load the capture: {shorten(str(err) or type(err).__name__, 120)}"
                             ) from None
    return _check_capture(path, table, ids, data)


#: What numpy and zipfile raise on damaged bytes: zip structure and CRCs, inflating, cut or unparsable
#: array headers and data, compression methods and encryption zipfile cannot handle.
_BAD_CAPTURE = (OSError, ValueError, EOFError, KeyError, struct.error, zipfile.BadZipFile, zipfile.LargeZipFile,
                zlib.error, NotImplementedError, RuntimeError, OverflowError, SyntaxError, tokenize.TokenError)


def max_capture_bytes(table: RowTable) -> int:
    """Largest capture file read: MAX_SELECTED rows of the widest form (float32) with their ids, and
    room for headers. A capture is never bigger than what it can describe."""
    return (1 << 20) + MAX_SELECTED * (8 + max(table.row_bytes, 4 * table.tensor.n_cols))


def _capture_arrays(path: str, f: BinaryIO, size: int) -> tuple[np.ndarray, np.ndarray]:
    if f.read(len(_NPY_MAGIC)) == _NPY_MAGIC:
        f.seek(0)
        loaded: Any = _map_npy(f, size)
        names = loaded.dtype.names or ()
        if "ids" not in names or len(names) != 2:
            raise UsageError(path, "a .npy capture must be a structured array with fields `ids` and the rows",
                             field="dtype")
        return loaded["ids"], loaded[[n for n in names if n != "ids"][0]]
    f.seek(0)
    loaded = np.load(f, allow_pickle=False)     # not a .npy: a zip (.npz), or refused (pickles)
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise UsageError(path, "the capture is neither a .npz nor a .npy file")
    with loaded:
        keys = list(loaded.keys())
        others = [k for k in keys if k != "ids"]
        if "ids" not in keys or len(others) != 1:
            raise UsageError(path, f"a .npz capture needs `ids` and exactly one rows array (found "
                                   f"{shorten(', '.join(map(quote, keys)), 120)})", field="arrays")
        for name in ("ids", others[0]):
            _check_npz_member(path, loaded, name)
        return loaded["ids"], loaded[others[0]]


_NPY_MAGIC = b"\x93NUMPY"


def _read_header(f: BinaryIO) -> tuple[tuple[int, ...], bool, np.dtype]:
    """Shape, Fortran order and dtype from a .npy header at *f*'s position; object dtypes refused."""
    version = np.lib.format.read_magic(f)
    reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, fortran, dtype = reader(f)
    if dtype.hasobject:
        raise ValueError("holds Python objects, which are refused (they load through pickle)")
    return shape, fortran, dtype


def _map_npy(f: BinaryIO, size: int) -> np.ndarray:
    """A .npy capture mapped read-only from the open file (numpy's own mapping would open the path again)."""
    shape, fortran, dtype = _read_header(f)
    offset = f.tell()
    nbytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if offset + nbytes > size:
        raise ValueError(f"EOF: the header promises {nbytes} bytes of array data, the file holds {size - offset}")
    if nbytes == 0:     # nothing to map (an empty mapping is an error)
        return np.zeros(shape, dtype=dtype, order="F" if fortran else "C")
    return np.memmap(f, dtype=dtype, mode="r", offset=offset, shape=shape, order="F" if fortran else "C")


def _check_npz_member(path: str, loaded: Any, name: str) -> None:
    """Refuse, from its header, an array of a .npz that would not fit comfortably in memory: numpy reads a
    .npz member whole (and may inflate it from a few bytes), where a .npy is mapped."""
    try:
        with loaded.zip.open(f"{name}.npy") as f:
            shape, _, dtype = _read_header(f)
    except _BAD_CAPTURE as err:
        raise UsageError(path, f"cannot read the header of `{shorten(name)}`: "
                               f"{shorten(str(err) or type(err).__name__, 120)}", field=shorten(name)) from None
    nbytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if nbytes > MAX_NPZ_BYTES:
        raise UsageError(path, f"`{shorten(name)}` would take {nbytes} bytes in memory (more than {MAX_NPZ_BYTES}); "
                               "save the capture as a structured .npy, which is read memory-mapped",
                         field=shorten(name))


def _check_capture(path: str, table: RowTable, ids: np.ndarray, data: np.ndarray) -> Capture:
    if ids.ndim != 1 or ids.dtype.kind not in "iu":
        raise UsageError(path, f"ids must be a 1-D integer array, not {ids.dtype}{list(ids.shape)}", field="ids")
    if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= table.n_rows):
        raise UsageError(path, f"ids must lie in 0..{table.n_rows - 1}", field="ids")
    n = len(ids)
    if data.dtype == np.uint8 and data.shape == (n, table.row_bytes):
        return Capture(path, ids.astype(np.int64), data, "raw")
    if data.dtype in (np.float16, np.float32) and data.shape == (n, table.tensor.n_cols):
        return Capture(path, ids.astype(np.int64), data, "decoded")
    raise UsageError(path, f"rows are {data.dtype}{list(data.shape)}; expected uint8[{n}, {table.row_bytes}] "
                           f"(raw) or float16/float32[{n}, {table.tensor.n_cols}] (decoded)", field="rows")
