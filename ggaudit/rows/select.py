"""What a rows check replays: the rows chosen (listed IDs, a RowSelection: every row, random rows,
page-crossing rows) and an engine's capture of gathered rows, validated before any read path runs."""

from __future__ import annotations

import os
import struct
import tokenize
import warnings
import zipfile
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO, ClassVar

import numpy as np

from ..io import opening
from ..errors import NothingChecked, ReadError, UsageError, check_arg
from ..arrays import distinct
from ..json_shape import json_key, json_record, to_json
from ..untrusted import quote, shorten
from ..evidence.readers import PAGE
from .table import RowTable

#: Selections larger than this must sweep the table (all_rows, which streams) rather than list IDs.
MAX_SELECTED = 1 << 24

#: Row IDs as a caller gives them: a sequence of ints (Python or numpy), a range, or a 1-D integer array.
RowIds = Sequence[int] | range | np.ndarray

#: Largest seed: seeds are 32-bit, as the ones chosen for you are (and as they are printed).
MAX_SEED = (1 << 32) - 1


# --- row selection -------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class RowSelection:
    """Ways to choose rows besides listing them. *random* distinct rows (*seed* makes the choice
    repeatable; without one a seed is chosen and reported) and every row crossing a 4096-byte page add
    to the rows listed; *all_rows* sweeps the whole table, streamed, and excludes everything else."""

    all_rows: bool = False
    random: int | None = None
    seed: int | None = None
    page_crossing: bool = False

    def __post_init__(self) -> None:
        check_arg("all_rows", self.all_rows, bool, "True or False")
        check_arg("page_crossing", self.page_crossing, bool, "True or False")
        check_arg("random", self.random, (int, type(None)), "an integer or None")
        check_arg("seed", self.seed, (int, type(None)), "an integer or None")
        if self.random is not None and self.random < 1:
            raise UsageError(None, f"must be at least 1, not {int_text(self.random)}", field="random")
        if self.seed is not None and not 0 <= self.seed <= MAX_SEED:
            # Not the value itself: a huge int cannot even be turned into text (Python's 4300-digit limit).
            raise UsageError(None, f"must be an integer in 0..{MAX_SEED}", field="seed")
        others = [name for name, on in (("random", self.random is not None), ("page_crossing", self.page_crossing))
                  if on]
        if self.all_rows and others:
            raise UsageError(None, f"sweeps the whole table; drop {', '.join(others)}", field="all_rows")


def int_text(value: int) -> str:
    """An int as text, or its size when it is too long to print (str() refuses 4300 digits and more)."""
    return str(value) if value.bit_length() <= 64 else f"an integer of {value.bit_length()} bits"


def row_ids(rows: object, n_rows: int) -> np.ndarray:
    """*rows* (a sequence of ints, a range or a 1-D integer array) as int64 IDs, each one a row of a table
    of *n_rows*; anything else is a UsageError naming `rows`."""
    if isinstance(rows, np.ndarray):
        return _array_ids(rows, n_rows)
    if isinstance(rows, range):
        return _range_ids(rows, n_rows)
    if isinstance(rows, Sequence) and not isinstance(rows, (str, bytes, bytearray)):
        return _sequence_ids(rows, n_rows)
    one = isinstance(rows, (int, np.integer)) and not isinstance(rows, (bool, np.bool_))
    raise UsageError(None, f"must be a sequence, range or numpy array of row IDs, not {type(rows).__name__}"
                           + ("; for one row, pass a list of one" if one else ""), field="rows")


def _outside(row: int, n_rows: int) -> UsageError:
    return UsageError(None, f"row {int_text(row)} is outside the table (rows 0..{n_rows - 1})", field="rows")


def _array_ids(rows: np.ndarray, n_rows: int) -> np.ndarray:
    if rows.ndim != 1:
        raise UsageError(None, f"must be a 1-D array of row IDs, not one of shape {rows.shape}", field="rows")
    if rows.dtype.kind not in "iu":
        raise UsageError(None, f"must hold integers, not {rows.dtype}", field="rows")
    outside = np.flatnonzero((rows < 0) | (rows >= n_rows))
    if outside.size:
        raise _outside(int(rows[outside[0]]), n_rows)
    return rows.astype(np.int64, copy=False)


def _range_ids(rows: range, n_rows: int) -> np.ndarray:
    if rows and not 0 <= rows[0] < n_rows:
        raise _outside(rows[0], n_rows)
    # How many leading IDs lie in the table: up to n_rows - 1 ascending, down to 0 descending.
    inside = -(-(n_rows - rows.start) // rows.step) if rows.step > 0 else rows.start // -rows.step + 1
    if rows and inside < len(rows):
        raise _outside(rows[inside], n_rows)
    if len(rows) > MAX_SELECTED:
        raise UsageError(None, f"{len(rows)} row IDs, more than {MAX_SELECTED}; sweep the table with "
                               "RowSelection(all_rows=True)", field="rows")
    return np.arange(rows.start, rows.stop, rows.step, dtype=np.int64)


def _sequence_ids(rows: Sequence[Any], n_rows: int) -> np.ndarray:
    if not rows:
        return np.zeros(0, dtype=np.int64)
    kinds = set(map(type, rows))   # in C: a list of 16M ints is checked in a fraction of a second
    if not all(issubclass(k, (int, np.integer)) and not issubclass(k, (bool, np.bool_)) for k in kinds):
        i, bad = next((i, x) for i, x in enumerate(rows)
                      if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)))
        # numpy 1.x calls its bool "bool_": the same message whatever numpy is installed.
        kind = "bool" if isinstance(bad, np.bool_) else type(bad).__name__
        raise UsageError(None, f"must hold integers, not {kind} (rows[{i}])", field="rows")
    if not (min(rows) >= 0 and max(rows) < n_rows):
        raise _outside(int(next(x for x in rows if not 0 <= x < n_rows)), n_rows)
    return np.array(rows, dtype=np.int64)


def crosses(offset: int, length: int, boundary: int) -> bool:
    return offset // boundary != (offset + length - 1) // boundary


def crossing_mask(offsets: np.ndarray, length: int, boundary: int) -> np.ndarray:
    mask: np.ndarray = offsets // boundary != (offsets + (length - 1)) // boundary
    return mask


def crossing_rows(table: RowTable, boundary: int = PAGE) -> np.ndarray:
    """Every row of the table that straddles a multiple of *boundary* (in absolute file offsets)."""
    found: list[np.ndarray] = []
    total = 0
    for hit in crossing_rows_of(table.tensor.offset, table.row_bytes, table.n_rows, boundary):
        total += hit.size
        if total > MAX_SELECTED:
            raise UsageError(table.path, f"more than {MAX_SELECTED} rows cross a page; sweep the table with "
                                         "RowSelection(all_rows=True)", field=table.name)
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


#: Runs of listed IDs a RowChoice keeps: enough to say and to draw a short list; a longer one is cut.
MAX_RUNS = 256
#: Characters of listed IDs the description shows before it is cut with "...".
IDS_WIDTH = 60


@json_record
class RowChoice:
    """How the rows checked were chosen, as data; :attr:`description` says it in words.

    ``all_rows``: every row of ``n_rows``, swept. ``listed``: the runs of consecutive IDs listed, as
    (first, last), in the order given (None: no IDs listed); at most MAX_RUNS of them, ``listed_complete``
    False when there were more. ``random``/``seed``: the random rows added and the seed that chose them;
    ``page_crossing``: every row crossing a 4096-byte page added; ``capture_ids``: nothing was chosen, so
    the capture's IDs were checked.
    """

    JSON_DEF: ClassVar[str] = "row_choice"
    JSON_EXTRA: ClassVar[dict[str, Any]] = {
        "description": "How the rows of a rows report were chosen, as data (selection says it in words)."}

    n_rows: int = json_key(in_json=False)
    all_rows: bool = False
    listed: tuple[tuple[int, int], ...] | None = json_key(default=None, minimum=0)
    listed_complete: bool = True
    random: int | None = json_key(default=None, minimum=1)
    seed: int | None = json_key(default=None, minimum=0)
    page_crossing: bool = False
    capture_ids: bool = False

    @property
    def description(self) -> str:
        """``rows 4,100-102 + random 5 seed 1 + page-crossing``, ``all 5000 rows``, ``capture IDs``."""
        if self.all_rows:
            return f"all {self.n_rows} rows"
        parts = []
        if self.listed is not None:
            parts.append(f"rows {self._listed_text() or '[]'}")
        if self.random is not None:
            parts.append(f"random {self.random} seed {self.seed}")
        if self.page_crossing:
            parts.append("page-crossing")
        return " + ".join(parts) or "capture IDs"

    def _listed_text(self) -> str:
        text = ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in self.listed or ())
        return text if len(text) <= IDS_WIDTH and self.listed_complete else text[:IDS_WIDTH - 3] + "..."

    @property
    def ranges(self) -> tuple[tuple[int, int], ...] | None:
        """The rows chosen as (first, last) ranges when this says which: every row (a sweep), or the IDs
        listed when nothing else was chosen and every run is kept; None otherwise (a random sample is
        known by its seed, page-crossing rows by the table's geometry)."""
        if self.all_rows:
            return ((0, self.n_rows - 1),)
        only_listed = self.random is None and not self.page_crossing and not self.capture_ids
        return self.listed if only_listed and self.listed_complete else None

    def to_json(self) -> dict[str, Any]:
        return to_json(self)


#: IDs given more than once that a report names (ascending); all of them are counted.
MAX_REPEATED = 20


@dataclass(frozen=True, kw_only=True)
class GivenIds:
    """The row IDs given (listed, or a capture's when its IDs are the selection), repeats included: each row is
    replayed once, so the IDs given more than once are said, not silently dropped."""

    count: int                          # IDs given, repeats included
    distinct: int                       # distinct rows among them
    repeated_count: int = 0             # distinct IDs given more than once
    repeated: tuple[int, ...] = ()      # the first MAX_REPEATED of those, ascending

    def to_json(self) -> dict[str, Any]:
        return {"ids_given": self.count, "ids_distinct": self.distinct, "repeated_count": self.repeated_count,
                "repeated_ids": list(self.repeated)}


def given_ids(ids: np.ndarray) -> GivenIds:
    """How many of ``ids`` there are, how many distinct, and which occur more than once."""
    n = int(ids.size)
    if n < 2 or bool((ids[1:] > ids[:-1]).all()):
        return GivenIds(count=n, distinct=n)    # ascending: nothing repeats, no sort needed
    values, counts = np.unique(ids, return_counts=True)
    twice = values[counts > 1]
    return GivenIds(count=n, distinct=int(values.size), repeated_count=int(twice.size),
                    repeated=tuple(int(v) for v in twice[:MAX_REPEATED]))


@dataclass(frozen=True)
class Selection:
    """The rows to replay (int64, each once, in first-chosen order; None for all_rows: the whole table,
    streamed), how they were chosen, and the IDs given (None: no ID was given, only chosen)."""

    rows: np.ndarray | None = field(compare=False)
    choice: RowChoice
    given: GivenIds | None = None

    @property
    def description(self) -> str:
        return self.choice.description

    @property
    def seed(self) -> int | None:
        return self.choice.seed


def select_rows(table: RowTable, rows: object = None, select: RowSelection | None = None, *,
                extra: Iterable[int] | np.ndarray = ()) -> Selection:
    """The union of the rows listed (see row_ids), those *select* chooses and *extra* (a capture's IDs),
    each once, in the order first chosen; all_rows excludes the others. A choice that names no row is an
    error: nothing would be checked."""
    check_arg("select", select, (RowSelection, type(None)), "a RowSelection or None")
    sel = select or RowSelection()
    listed = None if rows is None else row_ids(rows, table.n_rows)
    if sel.all_rows:
        if listed is not None:
            raise UsageError(None, "sweeps the whole table; drop rows", field="all_rows")
        return Selection(None, RowChoice(n_rows=table.n_rows, all_rows=True))
    picked = [np.asarray(extra if isinstance(extra, np.ndarray) else list(extra), dtype=np.int64)]
    runs, complete = (None, True) if listed is None else id_runs(listed)
    if listed is not None:
        picked.append(listed)
    seed = sel.seed
    if sel.random is not None:
        seed, sample = _random_rows(table, sel.random, sel.seed)
        picked.append(sample)
    if sel.page_crossing:
        picked.append(crossing_rows(table))
    chose = listed is not None or sel.random is not None or sel.page_crossing
    choice = RowChoice(n_rows=table.n_rows, listed=runs, listed_complete=complete, random=sel.random, seed=seed,
                       page_crossing=sel.page_crossing, capture_ids=not chose)
    given = listed if listed is not None else None if chose else picked[0]     # picked[0]: the capture's IDs
    chosen = _first_occurrences(np.concatenate(picked))
    if not chosen.size and not chose:
        raise UsageError(None, "none given and none selected: pass row IDs, or select=RowSelection(all_rows=True),"
                               " RowSelection(random=N) or RowSelection(page_crossing=True)", field="rows")
    if not chosen.size:
        raise NothingChecked(None, f"{choice.description} selected no rows; nothing was checked")
    if chosen.size > MAX_SELECTED:
        raise UsageError(None, f"{chosen.size} rows selected, more than {MAX_SELECTED}; sweep the table with "
                               "RowSelection(all_rows=True)")
    return Selection(chosen, choice, None if given is None else given_ids(given))


def id_runs(ids: np.ndarray, most: int = MAX_RUNS) -> tuple[tuple[tuple[int, int], ...], bool]:
    """The runs of consecutive IDs (each one more than the last) as (first, last): [4, 100, 101, 102]
    gives ((4, 4), (100, 102)); at most *most* of them (only those are looked at: the IDs may be
    millions), and whether that was all."""
    runs: list[tuple[int, int]] = []
    i = 0
    while i < ids.size and len(runs) < most:
        j = _run_end(ids, i)
        runs.append((int(ids[i]), int(ids[j - 1])))
        i = j
    return tuple(runs), i == ids.size


def _run_end(ids: np.ndarray, i: int, chunk: int = 1 << 16) -> int:
    """The index after the run of consecutive IDs (each one more than the last) that starts at *i*."""
    while True:
        part = ids[i:i + chunk]
        breaks = np.flatnonzero(np.diff(part) != 1)
        if breaks.size:
            return i + int(breaks[0]) + 1
        if i + part.size >= ids.size:
            return ids.size
        i += part.size - 1


def _first_occurrences(rows: np.ndarray) -> np.ndarray:
    """Each row once, in the order it was first chosen (a dict of 13M Python ints took a gigabyte)."""
    if rows.size < 2 or bool((rows[1:] > rows[:-1]).all()):
        return rows  # ascending already (page-crossing alone): nothing repeats, no sort needed
    order = np.argsort(rows, kind="stable")  # equal rows stay in the order they were chosen
    ranked = rows[order]
    first = np.ones(rows.size, dtype=bool)
    first[1:] = ranked[1:] != ranked[:-1]
    return rows[np.sort(order[first])]


def _random_rows(table: RowTable, n: int, seed: int | None) -> tuple[int, np.ndarray]:
    most = min(table.n_rows, MAX_SELECTED)
    if n > most:
        raise UsageError(None, f"choose 1..{most} rows, not {int_text(n)}", field="random")
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


#: The ``file`` of a capture handed over as arrays (``check_rows(..., against=(ids, rows))``).
IN_MEMORY = "(arrays in memory)"


def capture_of(ids: Any, rows: Any, table: RowTable) -> Capture:
    """An engine's gathered rows already in memory: *ids* and *rows* as a capture file holds them
    (anything numpy makes an array of), checked the same way."""
    try:
        ids, rows = np.asarray(ids), np.asarray(rows)
    except (ValueError, TypeError) as err:
        raise UsageError(None, f"must be (ids, rows) arrays: {shorten(str(err), 120)}", field="against") from None
    return _check_capture(IN_MEMORY, table, ids, rows)


def load_capture(path: str, table: RowTable, names: tuple[str, str] | None = None) -> Capture:
    """An engine's gathered rows: .npz with `ids` and one data array, or a structured .npy (ids, rows).

    Opened as every input is (ggaudit.io: regular files only, so a FIFO cannot hang the run nor a device
    feed it without end), size-capped, and parsed from that one descriptor: numpy never opens the path.
    Whatever is wrong with the bytes (a damaged zip, a bad CRC, a cut array, object or pickled data) is
    one UsageError naming the capture. *names*: the (IDs, rows) arrays or fields to use, whatever else the
    capture holds.
    """
    try:
        fd, st = opening.open_readonly(path)
    except ReadError as err:    # a capture the OS refused is also that standard exception (FileNotFoundError)
        message = f"cannot read the capture: {err.message}"
        raise (UsageError.for_os_error(path, message, err) if isinstance(err, OSError)
               else UsageError(path, message)) from None
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
                ids, data = _capture_arrays(path, f, st.st_size, names)
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


def _capture_arrays(path: str, f: BinaryIO, size: int, names: tuple[str, str] | None
                    ) -> tuple[np.ndarray, np.ndarray]:
    if f.read(len(_NPY_MAGIC)) == _NPY_MAGIC:
        f.seek(0)
        loaded: Any = _map_npy(f, size)
        fields = loaded.dtype.fields or {}
        named = _named(path, names, list(fields), "field") or \
            _told_apart({n: (fields[n][0].shape, fields[n][0].base) for n in fields}, 0)
        if named is None:
            raise UsageError(path, "a .npy capture must be a structured array with fields `ids` and the rows "
                                   "(or two fields told apart by shape: integer IDs, rows of values)", field="dtype")
        return loaded[named[0]], loaded[named[1]]
    f.seek(0)
    loaded = np.load(f, allow_pickle=False)     # not a .npy: a zip (.npz), or refused (pickles)
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise UsageError(path, "the capture is neither a .npz nor a .npy file")
    with loaded:
        keys = list(loaded.keys())
        named = _named(path, names, keys, "array") or \
            (_told_apart({k: _npz_header(path, loaded, k) for k in keys}, 1) if len(keys) == 2 else None)
        if named is None:
            raise UsageError(path, f"a .npz capture needs `ids` and exactly one rows array, or two arrays told "
                                   f"apart by shape: 1-D integer IDs, 2-D rows (found "
                                   f"{shorten(', '.join(map(quote, keys)), 120)})", field="arrays")
        for name in named:
            _check_npz_member(path, loaded, name)
        return loaded[named[0]], loaded[named[1]]


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


def _named(path: str, names: tuple[str, str] | None, found: list[str], what: str) -> tuple[str, str] | None:
    """The (IDs, rows) names asked for, when they are in the capture (None: none were asked for)."""
    if names is None:
        return None
    missing = [n for n in names if n not in found]
    if missing:
        raise UsageError(path, f"the capture has no {what} {quote(missing[0])} (found "
                               f"{shorten(', '.join(map(quote, found)), 120)})", field="capture_arrays")
    return names


def _told_apart(arrays: dict[str, tuple[tuple[int, ...], np.dtype]], ndim: int) -> tuple[str, str] | None:
    """(IDs, rows) of a capture's two arrays (or structured fields), given each one's (shape, dtype): the
    one named ``ids`` and the other, else the one of *ndim* dimensions holding integers and the one of
    more; None when the arrays do not tell which is which."""
    if len(arrays) != 2:
        return None
    if "ids" in arrays:
        return "ids", next(n for n in arrays if n != "ids")
    ids = [n for n, (shape, dtype) in arrays.items() if len(shape) == ndim and dtype.kind in "iu"]
    rows = [n for n, (shape, _) in arrays.items() if len(shape) == ndim + 1]
    return (ids[0], rows[0]) if len(ids) == 1 and len(rows) == 1 else None


def _npz_header(path: str, loaded: Any, name: str) -> tuple[tuple[int, ...], np.dtype]:
    """(shape, dtype) of a .npz member from its header, before numpy reads it."""
    try:
        with loaded.zip.open(f"{name}.npy") as f:
            shape, _, dtype = _read_header(f)
    except _BAD_CAPTURE as err:
        raise UsageError(path, f"cannot read the header of `{shorten(name)}`: "
                               f"{shorten(str(err) or type(err).__name__, 120)}", field=shorten(name)) from None
    return shape, dtype


def _check_npz_member(path: str, loaded: Any, name: str) -> None:
    """Refuse, from its header, an array of a .npz that would not fit comfortably in memory: numpy reads a
    .npz member whole (and may inflate it from a few bytes), where a .npy is mapped."""
    shape, dtype = _npz_header(path, loaded, name)
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
