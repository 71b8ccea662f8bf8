"""The scan's core: find and locate non-finite values and outliers in whole units of one tensor.

A *unit* is a block of a quantized type or one element of a float tensor. Every test runs on integer
keys (the stored bits with the sign cleared, which order like |x|): per slice, one gather of the field
bytes, one ``bitwise_and`` and one ``max`` decide whether anything needs reporting; only such slices
take the slow path that locates and classifies values. Block fields are read through strided views of
the caller's bytes (a mapping or a read buffer), so the quantized data itself is never copied.
"""

from __future__ import annotations

import functools
import logging
import threading
from dataclasses import dataclass, field
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import numpy as np

from ..format.blocks import BlockLayout, Encoding, FloatField, GGMLQuantizationType as T, decode_bits, dequantize
from ..format.blocks import LAYOUTS, dequantize_exact, iq1m_assemble, layout_of
from .report import (CAUSE_DECODED, CAUSE_FIELD, CAUSE_OVERFLOW, KIND_OF, KINDS, Finding, FindingKind, counted_kinds,
                     finite_or_none, hex_bits)
from ..arrays import distinct
from .histogram import count_codes

if TYPE_CHECKING:   # the scale model is imported where a plan has one: a scan without anomalies loads none
    from .anomalies import AnomalyAcc, GroupModel

log = logging.getLogger(__name__)

#: Raw bytes of float elements examined per numpy step: the key buffer (``out=``) stays in cache.
SLICE_BYTES = 1 << 20
#: Raw bytes of quantized blocks per step: only a few bytes per block are gathered, so more fit.
BLOCK_SLICE_BYTES = 4 << 20
#: Raw bytes decoded per gguf.quants call in --deep mode (decoded floats are ~20x larger).
DEEP_BYTES = 64 << 10


# ----- codecs: integer keys that order like |x| ---------------------------------------------------

@dataclass(frozen=True)
class Codec:
    """How to turn one encoding's stored bits into keys that order like |x|."""

    encoding: Encoding
    unit: str            # numpy dtype of one stored unit ('<u2' ...); IQ1_M: one of its 4 words
    mask: int            # key = raw & mask (sign bit cleared)
    inf_key: int         # keys >= inf_key are non-finite (NaN, +Inf, -Inf)


CODECS: dict[Encoding, Codec] = {
    Encoding.F16: Codec(Encoding.F16, "<u2", 0x7FFF, 0x7C00),
    Encoding.IQ1M_F16: Codec(Encoding.IQ1M_F16, "<u2", 0x7FFF, 0x7C00),
    Encoding.BF16: Codec(Encoding.BF16, "<u2", 0x7FFF, 0x7F80),
    Encoding.F32: Codec(Encoding.F32, "<u4", 0x7FFF_FFFF, 0x7F80_0000),
    Encoding.F64: Codec(Encoding.F64, "<u8", 0x7FFF_FFFF_FFFF_FFFF, 0x7FF0_0000_0000_0000),
    Encoding.E8M0: Codec(Encoding.E8M0, "u1", 0xFF, 0xFF),      # no sign; 0xFF is NaN
    Encoding.E4M3: Codec(Encoding.E4M3, "u1", 0x7F, 0x7F),      # 0x7F/0xFF are NaN, no Inf
    # As ggml and gguf decode it, bit 7 is ignored and 0x7F means zero: no byte is non-finite, and the
    # key is a rank from a lookup table because 0x7F breaks the ordering (see _ue4m3_ranks).
    Encoding.UE4M3: Codec(Encoding.UE4M3, "u1", 0xFF, 0x100),
}

@functools.cache
def _ue4m3_ranks() -> tuple[np.ndarray, np.ndarray]:
    """(byte -> rank of its value, rank -> value) for UE4M3, so ranks order like values."""
    values = decode_bits(Encoding.UE4M3, np.arange(256))
    uniq, rank = np.unique(values, return_inverse=True)
    return rank.astype(np.uint16), uniq


def _key_values(codec: Codec, keys: np.ndarray | int) -> np.ndarray:
    """|x| of each key as float64."""
    magnitudes: np.ndarray
    if codec.encoding is Encoding.UE4M3:
        magnitudes = _ue4m3_ranks()[1][np.asarray(keys, dtype=np.int64)]
    else:
        magnitudes = np.abs(decode_bits(codec.encoding, np.asarray(keys)))
    return magnitudes


@functools.lru_cache(maxsize=64)
def _threshold_key(codec: Codec, limit: float) -> int:
    """The largest key whose |x| <= limit: keys above it (and below inf_key) are outliers."""
    if codec.encoding is Encoding.F32:
        key = int(np.float32(min(limit, 3.4028234663852886e38)).view(np.uint32))
        return key - 1 if float(_key_values(codec, key)) > limit else key
    if codec.encoding is Encoding.F64:
        return min(int(np.float64(limit).view(np.uint64)), codec.inf_key - 1)
    top = len(_ue4m3_ranks()[1]) if codec.encoding is Encoding.UE4M3 else codec.inf_key
    values = _key_values(codec, np.arange(top))
    return int(np.searchsorted(values, limit, side="right")) - 1


def _floor_key(codec: Codec, floor: float) -> int:
    """The smallest key whose |x| >= floor; past every finite key when no finite value reaches it."""
    return min(codec.inf_key, _threshold_key(codec, float(np.nextafter(floor, 0.0))) + 1)


def _overflow_keys(layout: BlockLayout) -> dict[str, int]:
    """Per field of a type whose finite fields can decode past FLT_MAX, the smallest key from which its
    block may (the table's overflow floor): such blocks are decoded exactly."""
    return {f.name: _floor_key(CODECS[f.encoding], layout.overflow_floor(f)) for f in layout.fields}


#: The types whose blocks can overflow float32 with finite fields (Q8_K and Q8_1's f32 ``d``, MXFP4's
#: E8M0 ``e`` from 0xFD), and per field the key from which a block is decoded to find out. Every other
#: field's keys need a look only when non-finite.
OVERFLOW_KEY: dict[T, dict[str, int]] = {
    lay.ggml_type: _overflow_keys(lay) for lay in LAYOUTS.values() if lay.can_overflow}


# ----- per-tensor plans ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Group:
    """Fields of one encoding, equally spaced in the block: read as one (n, k) strided view."""

    fields: tuple[FloatField, ...]
    offset: int
    spacing: int
    codec: Codec

    @property
    def words(self) -> int:
        """Stored units per field (IQ1_M's scale spans four u16 words)."""
        return 4 if self.codec.encoding is Encoding.IQ1M_F16 else 1


@functools.cache
def groups(layout: BlockLayout) -> tuple[Group, ...]:
    groups: list[Group] = []
    for f in layout.fields:
        last = groups[-1] if groups else None
        if last is not None and last.codec.encoding is f.encoding and f.encoding is not Encoding.IQ1M_F16:
            gap = f.offset - last.fields[-1].offset
            if gap >= f.size and (len(last.fields) == 1 or gap == last.spacing):
                groups[-1] = Group((*last.fields, f), last.offset, gap, last.codec)
                continue
        groups.append(Group((f,), f.offset, f.size, CODECS[f.encoding]))
    return tuple(groups)


@dataclass(frozen=True)
class Options:
    max_abs: float | None
    limit: int
    fail_fast: bool
    #: Count each float field's values per power of two (Acc.scales); off, it costs nothing.
    histograms: bool = False
    #: Block scales were modelled (``anomaly`` is then one of the kinds counted).
    anomalies: bool = False

    @property
    def kinds(self) -> tuple[str, ...]:
        """The kinds of finding counted: ``anomaly`` only when scales were modelled."""
        return counted_kinds(self.anomalies)


@dataclass(frozen=True)
class Plan:
    """One tensor to scan; picklable so a worker process can receive it."""

    index: int
    name: str
    path: str
    offset: int
    nbytes: int
    n_cols: int
    layout: BlockLayout
    deep: bool
    #: Rows of one expert in a mixture-of-experts tensor (the expert is the last axis); 0: not one.
    rows_per_expert: int = 0
    #: With ``scan(..., anomalies=True)``: the scale model of each field group that has one
    #: (:mod:`ggaudit.scan.anomalies`): fitted, its rows are scored as they are scanned; not yet
    #: fitted, its keys are kept for a model of the whole tensor at the end.
    anomaly: tuple[GroupModel, ...] | None = None

    @property
    def units(self) -> int:
        return self.nbytes // self.layout.block_bytes

    @property
    def end(self) -> int:
        return self.offset + self.nbytes

    @property
    def units_per_row(self) -> int:
        return self.n_cols // self.layout.block_size

    def expert_of_row(self, row: int) -> int | None:
        return row // self.rows_per_expert if self.rows_per_expert else None


def count_expert(experts: dict[int, dict[str, int]], expert: int, kind: str, n: int = 1) -> None:
    experts.setdefault(expert, dict.fromkeys(KINDS, 0))[kind] += n


def add_experts(experts: dict[int, dict[str, int]], more: dict[int, dict[str, int]]) -> None:
    for expert, counts in more.items():
        for kind, n in counts.items():
            if n:
                count_expert(experts, expert, kind, n)


@dataclass
class Acc:
    """What has been found so far in one tensor (or one piece of it, in a worker)."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    max_abs: float | None = None
    findings: list[Finding] = field(default_factory=list)
    stopped: bool = False
    #: Per expert of a mixture-of-experts tensor with any finding: its counts per kind.
    experts: dict[int, dict[str, int]] = field(default_factory=dict)
    #: With Options.histograms: per float field name, its values counted per code (ggaudit.scan.histogram).
    scales: dict[str, np.ndarray] = field(default_factory=dict)
    #: With a plan's scale model: the blocks it questions.
    anomaly: AnomalyAcc | None = None

    def add_max(self, value: float | None) -> None:
        if value is not None and (self.max_abs is None or value > self.max_abs):
            self.max_abs = value

    def merge(self, other: Acc, limit: int) -> None:
        for kind, n in other.counts.items():
            self.counts[kind] += n
        add_experts(self.experts, other.experts)
        self.add_max(other.max_abs)
        self.findings.extend(other.findings[:max(0, limit - len(self.findings))])
        self.stopped = self.stopped or other.stopped
        for name, counts in other.scales.items():
            self.add_scales(name, counts)
        if other.anomaly is not None:
            if self.anomaly is None:
                from .anomalies import AnomalyAcc

                self.anomaly = AnomalyAcc()
            self.anomaly.merge(other.anomaly)

    def add_scales(self, name: str, counts: np.ndarray) -> None:
        mine = self.scales.get(name)
        if mine is None:
            self.scales[name] = counts.copy()
        else:
            mine += counts


# ----- the core: scan whole units held in a uint8 array ----------------------------------------------

@dataclass
class _Candidates:
    """Located values of one slice worth reporting, in file order, before they become Findings."""

    offsets: list[int] = field(default_factory=list)
    makers: list[Callable[[], Finding]] = field(default_factory=list)
    experts: dict[int, dict[str, int]] = field(default_factory=dict)    # counts per expert, all of them


@dataclass
class GroupPass:
    """One field group during a scan of one stretch of a tensor: its limits and the largest finite key."""

    group: Group
    triggers: np.ndarray  # per field: its keys >= this need a closer look (non-finite, or may overflow)
    trigger: int          # the lowest of them: a slice whose largest key is below it needs no look
    threshold: int        # keys above it (finite) are outliers
    max_key: int = -1


def _group_pass(layout: BlockLayout, group: Group, opts: Options) -> GroupPass:
    overflow = OVERFLOW_KEY.get(layout.ggml_type, {})
    inf_key = group.codec.inf_key
    triggers = np.array([overflow.get(f.name, inf_key) for f in group.fields], dtype=np.int64)
    threshold = inf_key if opts.max_abs is None else _threshold_key(group.codec, opts.max_abs)
    return GroupPass(group, triggers, int(triggers.min()), threshold)


def scan_units(plan: Plan, opts: Options, acc: Acc, data: np.ndarray, first_unit: int) -> None:
    """Scan ``data`` (whole units of ``plan`` starting at unit ``first_unit``) into ``acc``."""
    layout = plan.layout
    bb = layout.block_bytes
    per_slice = max(1, (SLICE_BYTES if layout.is_float_elements else BLOCK_SLICE_BYTES) // bb)
    passes = [_group_pass(layout, g, opts) for g in groups(layout)]
    n_units = len(data) // bb
    for u0 in range(0, n_units, per_slice):
        if acc.stopped:
            break
        n = min(per_slice, n_units - u0)
        _scan_slice(plan, opts, acc, passes, data[u0 * bb:(u0 + n) * bb], first_unit + u0)
    for p in passes:
        if p.max_key >= 0:
            acc.add_max(float(_key_values(p.group.codec, p.max_key)))


_SCRATCH = threading.local()     # per thread: scans may run in several threads of one process


def _scratch(role: str, dtype: str, size: int) -> np.ndarray:
    """A reused buffer per role and dtype (an ``out=`` target), grown on demand."""
    buffers: dict[tuple[str, str], np.ndarray] = _SCRATCH.__dict__.setdefault("buffers", {})
    buf = buffers.get((role, dtype))
    if buf is None or buf.size < size:
        buf = buffers[(role, dtype)] = np.empty(size, dtype=np.dtype(dtype).newbyteorder("="))
    return buf[:size]


_WIDE = {1: "u1", 2: "<u2", 4: "<u4", 8: "<u8"}


def raw_units(group: Group, data: np.ndarray, n: int, bb: int, contiguous: bool) -> np.ndarray:
    """The group's stored units of ``n`` blocks as an (n, k) array.

    Float elements are viewed in place. Block fields are gathered through a strided view of ``data``
    (one wide integer per block when the fields are adjacent), so only their bytes are read, into a
    small contiguous buffer where the tests run at full speed.
    """
    unit = np.dtype(group.codec.unit)
    k = len(group.fields) * group.words
    if contiguous:
        in_place: np.ndarray = np.ndarray((n, k), dtype=unit, buffer=data, offset=group.offset,
                                          strides=(bb, unit.itemsize))
        return in_place
    out = _scratch("raw", group.codec.unit, n * k).reshape(n, k)
    width = k * unit.itemsize
    step = unit.itemsize if group.words > 1 else group.spacing
    if step == unit.itemsize and width in _WIDE:
        wide = np.ndarray((n,), dtype=_WIDE[width], buffer=data, offset=group.offset, strides=(bb,))
        np.copyto(out.view(_WIDE[width]).reshape(n), wide)
    else:
        for j in range(k):
            np.copyto(out[:, j], np.ndarray((n,), dtype=unit, buffer=data, offset=group.offset + j * step,
                                            strides=(bb,)))
    return out


def unit_keys(group: Group, raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(keys, bits): keys order like |x|; bits are the stored values (IQ1_M: assembled), (n, fields)."""
    codec = group.codec
    if codec.encoding is Encoding.IQ1M_F16:
        bits = iq1m_assemble(raw.view(np.uint8)).reshape(-1, 1)
        return bits & np.uint16(codec.mask), bits
    if codec.encoding is Encoding.UE4M3:
        return _ue4m3_ranks()[0][raw], raw
    keys = _scratch("keys", codec.unit, raw.size).reshape(raw.shape)
    np.bitwise_and(raw, codec.mask, out=keys)
    return keys, raw


_SIGNED = {"<u2": "<i2", "<u4": "<i4", "<u8": "<i8"}


def _top_key(codec: Codec, raw: np.ndarray) -> int:
    """The largest key (|x| bits) of IEEE float elements without writing a key buffer: two read-only
    reductions, one over the bits as signed integers (the largest non-negative value) and one as
    unsigned (the largest negative one, sign bit set). -1 for encodings this does not apply to."""
    signed = _SIGNED.get(codec.unit)
    if signed is None or codec.encoding is Encoding.IQ1M_F16:
        return -1
    sign = codec.mask + 1
    top_pos = int(raw.view(signed).max())
    top_neg = int(raw.max()) - sign
    return max(top_pos, top_neg, 0)


def _scan_slice(plan: Plan, opts: Options, acc: Acc, passes: list[GroupPass], data: np.ndarray,
                first_unit: int) -> None:
    bb = plan.layout.block_bytes
    n = len(data) // bb
    slow: list[tuple[GroupPass, np.ndarray, np.ndarray]] = []
    for p in passes:
        raw = raw_units(p.group, data, n, bb, plan.layout.is_float_elements)
        if opts.histograms:
            _count_scales(acc, p.group, raw)
        keyed: tuple[np.ndarray, np.ndarray] | None = None
        top = _top_key(p.group.codec, raw) if plan.layout.is_float_elements else -1
        if top < 0:
            keyed = unit_keys(p.group, raw)
            top = int(keyed[0].max())
            if plan.anomaly is not None:
                _score_scales(plan, acc, p.group, keyed[0], first_unit)
        if top < p.trigger and top <= p.threshold:     # the common case: nothing to report here
            if top > p.max_key:
                p.max_key = top
            continue
        keys, bits = keyed or unit_keys(p.group, raw)
        finite = keys < p.group.codec.inf_key
        if finite.any():
            p.max_key = max(p.max_key, int(keys[finite].max()))
        slow.append((p, keys.copy(), bits.copy()))
    if slow or plan.deep:
        _report_slice(plan, opts, acc, slow, data, first_unit)


def _score_scales(plan: Plan, acc: Acc, group: Group, keys: np.ndarray, first_unit: int) -> None:
    """Keep or score the group's keys from unit ``first_unit`` for its scale model: scored a whole row at a
    time, a row cut by the end of the slice waiting for the next one (callers start at a row)."""
    model = next((m for m in plan.anomaly or () if m.key == group.offset), None)
    if model is None:
        return
    from .anomalies import AnomalyAcc, columns, score

    state = acc.anomaly = acc.anomaly or AnomalyAcc(units=plan.units, per_row=plan.units_per_row)
    if model.positions is None:
        state.keep(model, first_unit, keys)
        return
    carried = state.carry.pop(group.offset, None)
    if carried is not None:
        keys, first_unit = np.concatenate([carried[0], keys]), carried[1]
    per_row = plan.units_per_row
    if first_unit % per_row:
        raise AssertionError(f"{plan.name}: scale scoring started inside row {first_unit // per_row}")
    whole = len(keys) // per_row * per_row
    if whole < len(keys):
        state.carry[group.offset] = (keys[whole:].copy(), first_unit + whole)
    score([model], columns(keys[:whole], per_row)[None], [first_unit], [state])


def _count_scales(acc: Acc, group: Group, raw: np.ndarray) -> None:
    """Add the group's stored values, one field at a time, to the tensor's counts per code."""
    encoding = group.codec.encoding
    if encoding is Encoding.IQ1M_F16:
        acc.add_scales(group.fields[0].name, count_codes(encoding, iq1m_assemble(raw.view(np.uint8))))
        return
    for j, f in enumerate(group.fields):
        acc.add_scales(f.name, count_codes(encoding, raw[:, j]))


def _report_slice(plan: Plan, opts: Options, acc: Acc, slow: list[tuple[GroupPass, np.ndarray, np.ndarray]],
                  data: np.ndarray, first_unit: int) -> None:
    """Locate and classify what the fast test flagged in a slice (and decode it, with --deep)."""
    cands = _Candidates()
    room = 1 if opts.fail_fast else max(0, opts.limit - len(acc.findings))
    counts: dict[str, int] = dict.fromkeys(KINDS, 0)
    bad_blocks = [_locate(plan, opts, p, data, keys, bits, first_unit, counts, cands, room) for p, keys, bits in slow]
    flagged = distinct(np.concatenate(bad_blocks)) if bad_blocks else np.empty(0, np.int64)
    if plan.deep:
        _deep_slice(plan, data, flagged, first_unit, counts, cands, room)
    _commit(acc, opts, counts, cands)


def _locate(plan: Plan, opts: Options, p: GroupPass, data: np.ndarray, keys: np.ndarray, bits: np.ndarray,
            first_unit: int, counts: dict[str, int], cands: _Candidates, room: int) -> np.ndarray:
    """Classify the keys of one slice worth a look; returns the block indices that are non-finite."""
    group, codec = p.group, p.group.codec
    interesting = keys >= p.triggers
    if opts.max_abs is not None:
        interesting |= (keys < codec.inf_key) & (keys > p.threshold)
    flat = np.flatnonzero(interesting)
    k = keys.shape[1]
    rows, cols = np.divmod(flat, k)
    raw = bits[rows, cols].astype(np.uint64)
    values = decode_bits(codec.encoding, raw)
    kinds = np.full(len(flat), "", dtype=object)
    causes = np.full(len(flat), CAUSE_FIELD, dtype=object)
    kinds[np.isnan(values)] = "nan"
    kinds[np.isposinf(values)] = "+inf"
    kinds[np.isneginf(values)] = "-inf"
    suspect = np.flatnonzero((kinds == "") & (keys[rows, cols] >= p.triggers[cols]))
    if len(suspect):
        overflow = _overflow_kinds(plan.layout.ggml_type, data, rows[suspect], plan.layout.block_bytes)
        kinds[suspect] = overflow
        causes[suspect[overflow != ""]] = CAUSE_OVERFLOW
    if opts.max_abs is not None:
        kinds[(kinds == "") & (np.abs(values) > opts.max_abs)] = "outlier"
    keep = np.flatnonzero(kinds != "")
    for kind in KINDS:
        counts[kind] += int(np.count_nonzero(kinds[keep] == kind))
    if plan.rows_per_expert:
        _count_experts(plan, cands.experts, first_unit + rows[keep], kinds[keep])
    bits_bytes = 2 if group.words > 1 else group.fields[0].size    # IQ1_M: the assembled f16
    for i in keep[:room]:
        f = group.fields[cols[i] if group.words == 1 else 0]
        unit = first_unit + int(rows[i])
        offset = plan.offset + unit * plan.layout.block_bytes + f.offset
        cands.offsets.append(offset)
        cands.makers.append(functools.partial(
            finding_at, plan, unit, f, offset, hex_bits(int(raw[i]), bits_bytes),
            finite_or_none(float(values[i])), KIND_OF[str(kinds[i])], str(causes[i])))
    nonfinite = keep[kinds[keep] != "outlier"]
    located: np.ndarray = first_unit + rows[nonfinite]
    return located


def _count_experts(plan: Plan, experts: dict[int, dict[str, int]], units: np.ndarray, kinds: np.ndarray) -> None:
    """Add the findings at ``units`` (of kinds ``kinds``) to the counts of their experts."""
    of_unit = units // (plan.units_per_row * plan.rows_per_expert)
    for kind in KINDS:
        found, n = np.unique(of_unit[kinds == kind], return_counts=True)
        for expert, count in zip(found.tolist(), n.tolist(), strict=True):
            count_expert(experts, expert, kind, count)


def _overflow_kinds(ggml_type: T, data: np.ndarray, rows: np.ndarray, bb: int) -> np.ndarray:
    """Decode the few blocks past their overflow floor exactly; the kind of the first non-finite value, or ''."""
    blocks = np.stack([data[r * bb:(r + 1) * bb] for r in rows]).reshape(-1)
    with np.errstate(all="ignore"):     # overflow is what we are looking for
        decoded = dequantize_exact(blocks, ggml_type).reshape(len(rows), -1)
    return np.array([_first_kind(row)[0] for row in decoded], dtype=object)


def _first_kind(values: np.ndarray) -> tuple[str, int]:
    """The kind of the first non-finite value in ``values`` and its index, or ('', -1)."""
    bad = np.flatnonzero(~np.isfinite(values))
    if not len(bad):
        return "", -1
    v = values[bad[0]]
    return ("nan" if np.isnan(v) else "+inf" if v > 0 else "-inf"), int(bad[0])


def finding_at(plan: Plan, unit: int, f: FloatField, offset: int, bits: str, value: float | None, kind: FindingKind,
             cause: str) -> Finding:
    layout = plan.layout
    if layout.is_float_elements:
        row, column = divmod(unit, plan.n_cols)
        block, width = column, 1
    else:
        row, block = divmod(unit, plan.units_per_row)
        column, width = block * layout.block_size + f.first_col, f.width
    return Finding(tensor=plan.name, path=plan.path, kind=kind, row=row, column=column, width=width, block=block,
                   field=f.name, offset=offset, size=f.size, bits=bits, value=value, encoding=f.encoding.value,
                   cause=cause, expert=plan.expert_of_row(row))


def _deep_slice(plan: Plan, data: np.ndarray, flagged: np.ndarray, first_unit: int,
                counts: dict[str, int], cands: _Candidates, room: int) -> None:
    """Decode the slice with gguf.quants; report non-finite blocks the fields did not explain."""
    layout = plan.layout
    bb, bs = layout.block_bytes, layout.block_size
    step = max(1, DEEP_BYTES // bb)
    n = len(data) // bb
    listed = 0
    for b0 in range(0, n, step):
        m = min(step, n - b0)
        with np.errstate(all="ignore"):     # non-finite results are what we are looking for
            decoded = dequantize(data[b0 * bb:(b0 + m) * bb], layout.ggml_type).reshape(m, bs)
        bad = np.flatnonzero(~np.isfinite(decoded).all(axis=1))
        bad = bad[~np.isin(first_unit + b0 + bad, flagged)]
        for r in bad:
            kind, col = _first_kind(decoded[r])
            counts[kind] += 1
            unit = first_unit + b0 + int(r)
            row, block = divmod(unit, plan.units_per_row)
            expert = plan.expert_of_row(row)
            if expert is not None:
                count_expert(cands.experts, expert, kind)
            if listed >= room:
                continue
            listed += 1
            value = np.float32(decoded[r, col])
            offset = plan.offset + unit * bb
            cands.offsets.append(offset)
            cands.makers.append(functools.partial(
                Finding, tensor=plan.name, path=plan.path, kind=KIND_OF[kind], row=row, column=block * bs + col,
                width=1, block=block, field="decoded", offset=offset, size=bb,
                bits=hex_bits(int(value.view(np.uint32)), 4), value=None, encoding=Encoding.F32.value,
                cause=CAUSE_DECODED, expert=expert))


def _commit(acc: Acc, opts: Options, counts: dict[str, int], cands: _Candidates) -> None:
    """Add a slice's counts and its first findings (in file order) to the accumulator."""
    order = sorted(range(len(cands.offsets)), key=cands.offsets.__getitem__)
    if opts.fail_fast:
        if order:
            first = cands.makers[order[0]]()
            acc.findings.append(first)
            acc.counts[first.kind] += 1
            if first.expert is not None:
                count_expert(acc.experts, first.expert, first.kind)
            acc.stopped = True
        return
    for kind, n in counts.items():
        acc.counts[kind] += n
    add_experts(acc.experts, cands.experts)
    room = max(0, opts.limit - len(acc.findings))
    acc.findings.extend(cands.makers[i]() for i in order[:room])


def settle_anomalies(accs: Iterable[Acc]) -> None:
    """Model the tensors among ``accs`` whose keys have all arrived (kept for a model of the whole
    tensor), those of one shape together: called where several tensors' slices have just been scanned."""
    kept = [a.anomaly for a in accs if a.anomaly is not None and a.anomaly.kept]
    if kept:
        from .anomalies import settle

        settle(kept)


def by_file(plans: Iterable[Plan]) -> dict[str, list[Plan]]:
    files: dict[str, list[Plan]] = {}
    for p in sorted(plans, key=lambda p: (p.path, p.offset)):
        files.setdefault(p.path, []).append(p)
    return files


@functools.cache
def deep_supported(ggml_type: T) -> bool:
    """Whether gguf.quants can dequantize ``ggml_type`` (what --deep needs)."""
    layout = layout_of(ggml_type)
    try:
        dequantize(np.zeros(layout.block_bytes, np.uint8), ggml_type)
    except NotImplementedError:
        return False
    return True
