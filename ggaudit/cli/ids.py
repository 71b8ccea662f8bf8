"""Row IDs as the command line takes them: `--ids "4162,4170-4200"` and `--ids-file FILE` (the same text,
'#' comments, so a CSV of IDs, one or more a line, under a header naming its one column; or a JSON list of
IDs), turned into the int64 array the library's `check_rows(model, rows=...)` takes."""

from __future__ import annotations

import io
from array import array

import numpy as np

from ..io import opening
from ..errors import ReadError, UsageError
from ..rows.select import MAX_SELECTED
from ..untrusted import quote, shorten

#: Largest --ids-file read: a list of IDs or ranges, never model-sized.
MAX_IDS_FILE_BYTES = 64 << 20


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


def read_ids_file(path: str) -> str:
    """The text of an --ids-file, opened as every input is (ggaudit.io): regular files only, so a FIFO
    cannot hang the run nor a device such as /dev/zero feed it without end."""
    try:
        fd, st = opening.open_readonly(path)
    except ReadError as err:
        raise UsageError(path, f"cannot read ID file: {err.message}") from None
    with open(fd, "rb") as f:
        if st.st_size > MAX_IDS_FILE_BYTES:
            raise UsageError(path, f"ID file is larger than {MAX_IDS_FILE_BYTES >> 20} MiB; use --all or ranges")
        data = f.read(st.st_size)
    try:
        return data.decode("utf-8").removeprefix("\ufeff")   # a spreadsheet's CSV starts with a BOM
    except UnicodeDecodeError as err:
        raise UsageError(path, "ID file is not text", offset=err.start) from None


def ids_file_ids(text: str, source: str) -> str:
    """The --ids text of an ID file: a JSON list's IDs, or a CSV without its header line."""
    listed = unbracketed(text)
    return listed if listed is not text else headerless(text, source)


def headerless(text: str, source: str) -> str:
    """*text* with its header blanked: the first line holding a field, when every field of it is a name (starts
    with a letter or '_', quoted or not) and it names one column; the line stays, so line numbers are the
    file's. A header naming several columns is refused: every field of an ID file is read as a row ID."""
    start = 0
    for lineno, line in enumerate(io.StringIO(text), 1):
        fields = line.split("#", 1)[0].replace(",", " ").split()
        if not fields:
            start += len(line)
            continue
        if not all(_is_name(f) for f in fields):
            return text
        if len(fields) > 1:
            raise UsageError(f"{source} line {lineno}", f"a header naming {len(fields)} columns ("
                                                        f"{', '.join(quote(f) for f in fields[:4])}); every field "
                                                        "of an ID file is a row ID: keep only the IDs' column")
        return text[:start] + "\n" + text[start + len(line):]
    return text


def _is_name(field: str) -> bool:
    first = field.strip("\"'")[:1]
    return first.isalpha() or first == "_"


def unbracketed(text: str) -> str:
    """A JSON list of IDs (``[4162, 4170]``) as the comma list inside it; any other text as it is. The
    brackets become spaces, so a line number in a message is still the file's."""
    start, end = len(text) - len(text.lstrip()), len(text.rstrip())
    if end - start < 2 or text[start] != "[" or text[end - 1] != "]":
        return text
    return f"{text[:start]} {text[start + 1:end - 1]} {text[end:]}"


def given_ids(ids: tuple[str, ...], ids_files: tuple[str, ...], n_rows: int) -> tuple[np.ndarray, list[str]]:
    """The IDs of every --ids (joined) then every --ids-file, in the order given, and how each was given
    ("--ids 4,100-102", "--ids-file FILE") for a message that names them."""
    picked, said = [np.zeros(0, dtype=np.int64)], []
    if ids:
        text = ",".join(ids)
        picked.append(parse_ids(text, n_rows))
        said.append(f"--ids {(text if len(text) <= 60 else text[:57] + '...') or repr(text)}")
    for name in ids_files:
        picked.append(parse_ids(ids_file_ids(read_ids_file(name), name), n_rows, name))
        said.append(f"--ids-file {name}")
    return np.concatenate(picked), said
