"""After the replay: each mismatched row's right bytes decided from what every read path delivered of it
(ggaudit.rows.row_decision), the mismatches made again against them, and bytes found nowhere near their row looked
for further away (ggaudit.rows.far_search).

The replay compares every path with one buffered reference read, since the right bytes cannot be known
before every path has delivered the row. When the evidence says the reference read was wrong, the paths
that agreed with it are the ones that erred: their deliveries become mismatches, and the deliveries of
the right bytes stop being mismatches.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import xxhash

from ..errors import ManifestError
from ..format.layout import Tensor
from ..verify.manifests.tensor import TensorDigest, TensorManifest
from .classify import Classifier, Delivery, RowMismatch, HEX_WINDOW
from .far_search import far_sources
from .gather import Sample, uniform
from ..evidence.readers import ReadFailed, BufferedReader
from .table import RowTable
from .digest_proof import Proof
from .row_decision import REFERENCE_READ, RowTruth, decide_row, published_truth
from ..evidence.paths import source_of

__all__ = ["Kept", "RowGroups", "Settled", "manifest_groups", "name_far_sources", "settled"]

#: The stage of the reference read when it is the one that erred.
REFERENCE_STAGE = "reference"


@dataclass
class Kept:
    """A mismatch kept in full, with what settling the row's right bytes needs: the bytes it was compared
    with and delivered, and how to classify the same delivery against other right bytes (None: a capture)."""

    mismatch: RowMismatch
    expected: bytes | None = None
    actual: bytes | None = None
    remake: Callable[[bytes], RowMismatch] | None = None


class RowGroups:
    """A tensor manifest's row-group digests of the table: whether a row's bytes, put in their group as read
    through the reference, give the group's digest. A group whose read fails (handed to *failed*) matches
    nothing: it decides nothing, and agreement of the paths decides instead."""

    def __init__(self, digest: TensorDigest, reference: BufferedReader,
                 failed: ReadFailed) -> None:
        self.digest, self.reference, self.failed = digest, reference, failed

    def matches(self, row: int, data: bytes) -> bool:
        d = self.digest
        group = row // d.rows_per_group
        offset, length = d.group_span(group)
        bytes_of_group = self.reference.read_or_report(offset, length, self.failed)
        if bytes_of_group is None:
            return False
        at = (row - group * d.rows_per_group) * d.row_bytes
        spliced = bytes_of_group[:at] + data + bytes_of_group[at + len(data):]
        return bool(xxhash.xxh3_128_hexdigest(spliced) == d.groups[group])


def manifest_groups(manifest: TensorManifest, tensor: Tensor, source: str) -> TensorDigest:
    """The manifest's entry for *tensor*: its file's and name's, with the same rows."""
    base = os.path.basename(tensor.path)
    named = [t for t in manifest.tensors if t.name == tensor.name]
    entry = next((t for t in named if t.file == base), named[0] if len(named) == 1 else None)
    if entry is None:
        raise ManifestError(source, f"has no tensor {tensor.name!r} of {base!r}", field="tensors")
    if (entry.row_bytes, entry.n_rows, entry.offset) != (tensor.row_bytes, tensor.n_rows, tensor.offset):
        raise ManifestError(source, f"describes another {tensor.name!r}: {entry.n_rows} rows of {entry.row_bytes} "
                                    f"bytes at offset {entry.offset}, not {tensor.n_rows} of {tensor.row_bytes} at "
                                    f"{tensor.offset}", field="tensors")
    return entry


@dataclass(frozen=True)
class Settled:
    """The mismatches made against each row's decided bytes, the rows whose right bytes are not the reference
    read's (row: the right bytes), and what the published digest proved (None: it was not asked)."""

    kept: list[Kept]
    decided: dict[int, bytes]
    proof: Proof | None = None


def settled(kept: Sequence[Kept], ran: Mapping[str, Mapping[str, None]], table: RowTable,
            reference: BufferedReader, probed: Mapping[str, int], groups: RowGroups | None,
            prove: Callable[[Sequence[int]], Proof] | None = None,
            failed: ReadFailed | None = None) -> Settled:
    """Each mismatched row's bytes decided (by *groups*, a tensor manifest's, when given; else agreement;
    the rows still disputed then by *prove*, the published digest's whole-file reads, when given); a read of
    the file around a row for its classification that fails goes to *failed* (None: it raises)."""
    by_row: dict[int, list[Kept]] = {}
    for k in kept:
        if k.expected is not None:      # a capture's rows are compared once the rows' bytes are decided
            by_row.setdefault(k.mismatch.row, []).append(k)
    sources = {mode: source_of(mode, table.path).reads for mode in ran}
    truths = {row: _truth(row, entries, ran, groups, sources) for row, entries in by_row.items()}
    disputed = [row for row, truth in truths.items() if truth.disputed]
    proof = prove(disputed) if disputed and prove is not None else None
    if proof is not None:
        for row in disputed:
            truths[row] = published_truth(truths[row], proof.rows.get(row), proof.basis)
    out = [k for k in kept if k.expected is None]
    decided: dict[int, bytes] = {}
    for row, entries in by_row.items():
        if truths[row].right != entries[0].expected:
            decided[row] = truths[row].right
        out.extend(_against(row, entries, truths[row], ran, table, reference, probed, failed))
    return Settled(out, decided, proof)


def _truth(row: int, entries: Sequence[Kept], ran: Mapping[str, Mapping[str, None]],
           groups: RowGroups | None, sources: Mapping[str, str]) -> RowTruth:
    ref = entries[0].expected
    assert ref is not None
    delivered = {REFERENCE_READ: ref}
    for mode, stages in ran.items():
        first = next(iter(stages))      # gather or sweep: the path's own read, before any cache
        delivered[mode] = next((k.actual for k in entries if k.actual is not None and
                                (k.mismatch.mode, k.mismatch.stage) == (mode, first)), ref)
    return decide_row(delivered, None if groups is None else lambda data: groups.matches(row, data), sources)


def _against(row: int, entries: Sequence[Kept], truth: RowTruth, ran: Mapping[str, Mapping[str, None]],
             table: RowTable, reference: BufferedReader, probed: Mapping[str, int],
             failed: ReadFailed | None) -> list[Kept]:
    ref, right = entries[0].expected, truth.right
    assert ref is not None
    if right == ref:
        return [dataclasses.replace(k, mismatch=_told(k.mismatch, truth)) for k in entries]
    out = [Kept(_told(k.remake(right) if k.remake else k.mismatch, truth), ref, k.actual, k.remake)
           for k in entries if k.actual != right]
    # Every stage that delivered the reference read's bytes erred with it, and so did that read.
    seen = {(k.mismatch.mode, k.mismatch.stage) for k in entries}
    wrong = [(m, s) for m, stages in ran.items() for s in stages if (m, s) not in seen]
    for mode, stage in [*wrong, ("buffered", REFERENCE_STAGE)]:
        classifier = Classifier(table, reference, probed.get(mode, 0), failed)
        made = classifier.mismatch(Sample(row, ref), right, mode, stage)
        out.append(Kept(_told(made, truth), right, ref))
    return out


def _told(m: RowMismatch, truth: RowTruth) -> RowMismatch:
    """The mismatch saying what decided the row's bytes and which deliveries held which bytes."""
    shown = tuple(Delivery(paths, data[m.byte:m.byte + HEX_WINDOW].hex(" "),
                           data == truth.right if truth.decided else None)
                  for paths, data in truth.groups)
    why = truth.explanation
    return dataclasses.replace(m, reference=truth.reference, delivered=shown,
                               detail=f"{m.detail}; {why}" if why else m.detail)


def name_far_sources(kept: Sequence[Kept], table: RowTable, reference: BufferedReader, probed: Mapping[str, int],
              failed: ReadFailed) -> list[Kept]:
    """Garbage rows whose bytes are a row of the table or a place in the file further away, named (a read of
    the search that fails goes to *failed*; a row found only there stays garbage)."""
    far = [i for i, k in enumerate(kept) if k.mismatch.kind == "garbage" and k.actual is not None
           and not uniform(k.actual, k.actual[0])]
    if not far:
        return list(kept)
    wanted = [(kept[i].mismatch.row, kept[i].actual or b"") for i in far]
    out = list(kept)
    for i, found in zip(far, far_sources(table, reference, wanted, failed), strict=True):
        if found is not None:
            out[i] = dataclasses.replace(kept[i], mismatch=_from_far(kept[i].mismatch, found, table, probed))
    return out


def _from_far(m: RowMismatch, found: tuple[int | None, int], table: RowTable,
              probed: Mapping[str, int]) -> RowMismatch:
    """The garbage row named by where its bytes were found; what settling said of the row's right bytes (the
    detail after the classifier's sentence, which holds no "; ") stays."""
    other, offset = found
    away = abs(offset - m.row_offset)
    settled_words = m.detail.partition("; ")[2]
    tail = f"; {settled_words}" if settled_words else ""
    if other is None and offset + m.length <= probed.get(m.mode, 0):
        return dataclasses.replace(m, kind="stale", other_offset=offset,
                                   detail=f"the bytes of offset {offset}, which only the alignment probe (the read "
                                          f"of offset 0 when the path opened) read: a previous request's buffer{tail}")
    what = f"row {other}, {abs(other - m.row)} rows" if other is not None else f"offset {offset},"
    return dataclasses.replace(m, kind="misplaced", other_row=other, other_offset=offset,
                               detail=f"the bytes of {what} ({away} bytes) away: a wrong base or an overflowing "
                                      f"index{tail}")
