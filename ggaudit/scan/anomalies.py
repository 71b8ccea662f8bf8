"""Block scales that sit far outside their tensor's distribution: likely flipped exponent bits.

A quantizer derives a block's scale from the block's largest |x| (``d = max|x| / qmax``), so log2|d|
follows the magnitude of the weights it covers: it varies smoothly by row (output channel) and by block
position (input channels, where a few outlier features are wide across all rows). One flipped exponent
bit k (10..14) of an f16 scale moves log2|d| by exactly ±2^(k-10): 1, 2, 4, 8 or 16. The model is
additive in log2: ``log2|d[r, b]| ~ row[r] + position[b]``, fitted with medians (a few damaged blocks
cannot move a median); a block's *residual* is its distance from that fit and its *score* the residual
over the tensor's robust spread of residuals (1.4826 x MAD, floored so a tensor of near-identical scales
does not turn a rounding step into an alarm).

Everything works on *keys*: a scale's stored bits with the sign cleared. For IEEE encodings the key is
the exponent followed by the mantissa, which is log2|x| to within 0.086 (``key / 2^mantissa_bits`` is
Mitchell's approximation of ``log2|x| + bias``), so the model costs integer masks, not logarithms.
Subnormal keys (nearly every Q6_K scale of a real model, many Q4_K ones) are linear in |x|, not log2:
their spread is compressed, which keeps the model conservative there (taking their exact log2 was tried:
it turned Qwen2.5's real outliers in subnormal Q4_K scales into two false positives and found 3% more of
the Q6_K flips), while a flip still moves a key by 2^mantissa bits per exponent step.
Position effects and the spread come from a sample of the tensor's rows (:func:`fit`); row effects are
each row's own median, taken (:func:`score`) only for rows whose keys span more than the tail: a row
whose range is narrower cannot hold a block that far from its median, and that test is two reductions.

A score alone cannot tell a flip from a real outlier block: real models (Qwen2.5's ``ffn_down``, say)
hold blocks 90 times larger than their row and position predict, 26 spreads out, in every copy. So a
block scoring beyond CANDIDATE_THRESHOLD is decided by a second, independent test:

* Types whose blocks carry a minimum (``x = d*q + m``: Q4_1, Q5_1, Q2_K, Q4_K, Q5_K): the quantizer fits
  d and m together, so a clean block decodes to values whose median is near 0 against its largest |x|,
  while a flip of either field, even of bit 10, throws the two terms out of balance and shifts the whole
  block off zero (:func:`centering`). Flagged above CENTERING_THRESHOLD, and by isolation (below) with
  the wider steps GAP_UP_MINIMUM / GAP_DOWN_MINIMUM.
* Other types (``x = d*q``: a flip scales the block and leaves nothing inside it to tell): *isolation*.
  A real tail is continuous, a flip stands apart: going down a field's most extreme blocks in one
  direction, the first step of more than GAP_UP (upward) or GAP_DOWN log2 units to the next block (or to
  TAIL_THRESHOLD spreads, the tail's edge, after the last) flags the blocks above it. Up to EXTREMES
  flips of one field and direction are found this way, the same bit flipped in several blocks included.
  And *standing alone* (:func:`lonely`), for a flip that lands inside a long real tail: real outlier
  blocks come in rows or at positions that hold others like them (outlier features, massive-activation
  channels), a flip lands anywhere. A candidate more than LONE_UP / LONE_DOWN log2 units beyond both
  its row's other blocks and its position's (the COLUMN_RANK-th most extreme other block of the tensor
  there, or about the 97th percentile of the fit's sampled rows) is flagged. This test is per block,
  so its false alarms grow with a model's size; its upward step is wide for that reason.

What this cannot find: a flip that stays inside the tensor's normal range (bits 10 and 11 of most
scales, any mantissa bit, bit 12 of a block in a ``d*q`` tensor whose rows and positions already hold
real blocks 16 times their typical scale), a flipped quant (a
nibble or byte of ``qs``: one weight changes within the block's own range), and damage to float tensors:
their elements have no per-block scale, and an element's magnitude varies too much from its neighbours
(embeddings, attention weights) for a flipped exponent below bit 14 to stand out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
import dataclasses
from dataclasses import dataclass, field

import numpy as np

from ..format import affine
from ..format.blocks import BlockLayout, Encoding

__all__ = ["CANDIDATE_THRESHOLD", "CENTERING_THRESHOLD", "COLLECT_MAX_BLOCKS", "COLUMN_RANK", "GAP_DOWN",
           "GAP_DOWN_MINIMUM", "GAP_UP", "GAP_UP_MINIMUM", "KEY_UNITS", "LONE_DOWN", "LONE_UP",
           "MAX_DOUBTFUL", "SPREAD_FLOOR", "TAIL_THRESHOLD", "AnomalyAcc", "GroupModel", "Suspect", "centering",
           "columns", "fit", "has_minimum", "lone_distance", "lone_gap", "lonely", "row_reach", "score", "settle",
           "unfitted"]

#: Keys per unit of log2 for each encoding a scale model applies to (2^mantissa bits). NVFP4's UE4M3
#: sub-block scales are left out: their keys are ranks through a table (0x7F means zero), not log2.
KEY_UNITS: dict[Encoding, int] = {Encoding.F16: 1 << 10, Encoding.IQ1M_F16: 1 << 10, Encoding.BF16: 1 << 7,
                                  Encoding.F32: 1 << 23, Encoding.E8M0: 1}
#: Smallest spread (log2 units) a tensor is given: a tensor whose scales are all alike (a constant-
#: initialised norm, a tiny tensor) would otherwise divide by ~0.
SPREAD_FLOOR = 0.25
#: Blocks scoring beyond CANDIDATE_THRESHOLD (either sign) are decided by the second test. Types with a
#: minimum: flagged when their centering is above CENTERING_THRESHOLD (the four real models of
#: scripts/bench_anomalies.py: clean candidates at most 0.191; flipped candidates above it 98% of the time
#: for bit 12, 99.5% for bits 13 and 14). Other types: the blocks above the first step down of more than
#: GAP_UP / GAP_DOWN log2 units among the most extreme of a direction, the tail's edge at TAIL_THRESHOLD
#: spreads (the largest such step of a clean real tensor: 1.61 upward, 0.50 downward).
CANDIDATE_THRESHOLD = 8.0
CENTERING_THRESHOLD = 0.25
TAIL_THRESHOLD = 6.0
GAP_UP = 2.0
GAP_DOWN = 1.0
#: Types with a minimum are also flagged by isolation, with wider steps: their real tails hold lone
#: blocks (the largest clean step: 3.05 upward, 0.85 downward), and the test is there for the flips
#: centering misses (a x256 or x65536 scale whose sub-block scales vary, Q4_K's).
GAP_UP_MINIMUM = 5.0
GAP_DOWN_MINIMUM = 2.0
#: Types without a minimum: a candidate is also flagged when it stands more than LONE_UP / LONE_DOWN log2
#: units beyond both its row (the most extreme of the row's other blocks) and its position (the
#: COLUMN_RANK-th most extreme other block of the tensor there): a real outlier block sits in a row or at
#: a position that holds others like it (an outlier feature, a massive-activation channel), a flip
#: lands anywhere. The four real models of scripts/bench_anomalies.py: clean candidates stand at most
#: 2.67 upward and 1.50 downward, and of their 37,423 clean candidates (24.8M blocks of these types)
#: 115 stand beyond 1.0 upward, 38 beyond 1.5, 9 beyond 2.0 and 1 beyond 2.5; downward 3 beyond 1.0. The
#: count grows with a model's blocks, so the upward step is wider than these models alone would need.
LONE_UP = 3.5
LONE_DOWN = 2.5
COLUMN_RANK = 3
#: A tensor of at most this many blocks has its keys kept as the scan reads them and is modelled whole
#: at the end (2 bytes a block and field); a larger one is fitted on a sample of its rows before the scan
#: and scored row by row as it is read, so memory stays bounded whatever the tensor's size.
COLLECT_MAX_BLOCKS = 1 << 20
#: Rows the position effects of a tensor modelled whole are the medians of, and values the spread and the
#: typical range are taken from (whole rows of those, evenly strided): a median of 64 moves by about a
#: sixth of a spread, and a fit costs dozens of numpy calls per batch of tensors whatever their size.
SAMPLE_ROWS = 1 << 6
SPREAD_SAMPLE = 1 << 10
#: Tail blocks kept per field and direction of a ``d*q`` type: the isolation test looks for the first
#: gap among them, from the most extreme down.
EXTREMES = 8
#: Row effects need a median that one block cannot move: three blocks per row or more.
MIN_ROW_BLOCKS = 3
#: Tensors fitted together at most (their keys stacked: COLLECT_MAX_BLOCKS blocks each at most).
_BATCH = 64
#: Candidates with a minimum kept per tensor for decoding; beyond it they are counted and a warning says so.
MAX_DOUBTFUL = 1 << 12


def has_minimum(layout: BlockLayout) -> bool:
    """Whether blocks of ``layout`` decode to ``d*q + m`` (a min field beside the scale; the types
    :mod:`ggaudit.format.affine` decodes for :func:`centering`)."""
    return layout.ggml_type in affine.TYPES


@dataclass(frozen=True, eq=False)
class GroupModel:
    """The scale model of the float fields of one field group (fields of one encoding read together:
    Q4_K's ``d`` and ``dmin``) of one tensor; ``key`` is the group's offset in the block.

    Keys ``low <= key < high`` are modelled (zero and non-finite scales are left out: the scan reports
    the non-finite ones itself). ``positions`` (fields, blocks per row): the median residual of each
    block position once each row's median is removed (``rows_model``), or the median key of each
    position (fewer than MIN_ROW_BLOCKS blocks per row); None until fitted (a tensor whose keys are kept
    and modelled whole at the end). ``spreads``: the robust spread of each field's residuals, in keys.
    ``typical``: each field's 1st and 99th percentile of |scale|. ``column_reach`` (directions, fields,
    blocks per row): how far, in keys, the sampled rows reach above (0) and below (1) at each position
    (about their 97th percentile), what a lone block is weighed against (:func:`lonely`)."""

    key: int
    names: tuple[str, ...]
    encoding: Encoding
    low: int
    high: int
    rows_model: bool
    minimum: bool          # the type's blocks carry a min field (centering decides too; wider isolation steps)
    positions: np.ndarray | None = None
    spreads: np.ndarray | None = None
    typical: tuple[tuple[float, float], ...] = ()
    column_reach: np.ndarray | None = None

    def reach(self, score: float) -> np.ndarray:
        """A score as a distance in keys, per field."""
        assert self.spreads is not None
        out: np.ndarray = score * self.spreads
        return out

    def spread(self, name: str) -> float:
        assert self.spreads is not None
        return float(self.spreads[self.names.index(name)])


def unfitted(key: int, names: Sequence[str], encoding: Encoding, high: int, blocks_per_row: int,
             minimum: bool) -> GroupModel:
    """The model of a group before any fit."""
    return GroupModel(key=key, names=tuple(names), encoding=encoding, low=0 if encoding is Encoding.E8M0 else 1,
                      high=high, rows_model=blocks_per_row >= MIN_ROW_BLOCKS, minimum=minimum)


def columns(keys: np.ndarray, per_row: int) -> np.ndarray:
    """Keys of whole rows as the kernel reads them (blocks, fields) laid out as the model uses them:
    (fields, blocks per row, rows), contiguous, so that a reduction over a row's blocks combines whole
    vectors of rows (numpy's reduction along a short last axis runs a loop per row)."""
    grid: np.ndarray = np.ascontiguousarray(keys.reshape(-1, per_row, keys.shape[1]).transpose(2, 1, 0))
    return grid


def fit(models: Sequence[GroupModel], keys: np.ndarray, rows: int = 0) -> list[GroupModel]:
    """Each of ``models`` fitted on its tensor's keys: ``keys`` stacks tensors of one shape (tensors,
    fields, blocks per row, rows; see :func:`columns`), and all are fitted in the same numpy calls, so a
    model of many small tensors costs what one costs. At most ``rows`` rows (SAMPLE_ROWS unless given),
    evenly strided, give the position effects, and about SPREAD_SAMPLE values of those the spread and
    the typical range."""
    model = models[0]
    sample = keys[..., ::-(-keys.shape[-1] // (rows or SAMPLE_ROWS))]
    clean = _all_valid(model, sample)
    grid = _as_float(model, sample, clean)                                 # tensors, fields, blocks, rows
    if model.rows_model:
        grid -= _medians(np.ascontiguousarray(np.swapaxes(grid, -1, -2)), clean)[..., None, :]
    positions = _medians(grid, clean)                                     # tensors, fields, blocks
    residual = grid - positions[..., None]
    step = -(-residual.shape[-2] * residual.shape[-1] // SPREAD_SAMPLE)
    values = residual[..., ::step].reshape(*residual.shape[:2], -1)
    center = _medians(values, clean)
    spreads = 1.4826 * _medians(np.abs(values - center[..., None]), clean)
    spreads = np.maximum(np.nan_to_num(spreads), SPREAD_FLOOR * KEY_UNITS[model.encoding])
    typical = _typical(model, sample[..., ::step].reshape(*sample.shape[:2], -1), clean)
    reach = _column_reach(residual)
    return [dataclasses.replace(m, positions=positions[t].astype(np.float32), spreads=spreads[t],
                                typical=tuple((float(lo), float(hi)) for lo, hi in typical[t]),
                                column_reach=reach[:, t])
            for t, m in enumerate(models)]


def _column_reach(residual: np.ndarray) -> np.ndarray:
    """(directions, tensors, fields, blocks): how far each position's sampled rows reach above and below
    (NaN counts as 0, the row's median; at least 0): their k-th most extreme residual, k one per 32 rows
    (about the 97th percentile) and at least 2, so that a few damaged blocks in the sample cannot widen
    their own position."""
    ordered = np.sort(np.nan_to_num(residual), axis=-1)
    n = ordered.shape[-1]
    k = min(max(2, -(-n // 32)), n)
    out: np.ndarray = np.maximum(np.stack([ordered[..., n - k], -ordered[..., k - 1]]), 0).astype(np.float32)
    return out


def score(models: Sequence[GroupModel], keys: np.ndarray, first_units: Sequence[int],
          accs: Sequence[AnomalyAcc]) -> None:
    """Score whole rows of keys against fitted ``models``, one per tensor of ``keys`` (tensors, fields,
    blocks per row, rows; see :func:`columns`): tensor t's first row starts at unit ``first_units[t]``
    and what it finds goes to ``accs[t]``. Only rows whose span exceeds the tail are looked at closely
    (see :func:`_wide_rows`)."""
    if not keys.size:
        return
    positions = np.stack([_positions(m) for m in models])                     # tensors, fields, blocks
    tail = np.stack([m.reach(TAIL_THRESHOLD) for m in models])              # tensors, fields
    clean = _all_valid(models[0], keys)
    if models[0].rows_model and clean:
        tensors, rows = _wide_rows(keys, positions, tail)
    else:
        tensors, rows = (a.ravel() for a in np.indices((keys.shape[0], keys.shape[-1])))
    if not rows.size:
        return
    sub = _rows_of(keys, tensors, rows)                                        # pairs, fields, blocks
    grid = _as_float(models[0], sub, clean)          # a new array: worked in place, not copied twice more
    grid -= positions[tensors]
    centers = _medians(grid, clean) if models[0].rows_model else np.zeros(grid.shape[:2], np.float32)
    residual = grid
    residual -= centers[..., None]
    with np.errstate(invalid="ignore"):
        pair, j, b = np.nonzero(np.abs(residual) > tail[tensors][..., None])
    if not pair.size:
        return
    values = residual[pair, j, b]
    owner = tensors[pair]
    code = owner * residual.shape[1] + j                     # one group per tensor and field, in file order
    by_code = np.argsort(code, kind="stable")
    for mine in np.split(by_code, np.flatnonzero(np.diff(code[by_code])) + 1):
        t, jj = int(owner[mine[0]]), int(j[mine[0]])
        model, acc = models[t], accs[t]

        def suspect(k: int, model: GroupModel = model, t: int = t, jj: int = jj) -> Suspect:
            i = pair[k]
            return Suspect(unit=first_units[t] + int(rows[i]) * keys.shape[2] + int(b[k]), field=model.names[jj],
                           residual=float(values[k]), predicted=float(centers[i, jj] + positions[t, jj, b[k]]))

        candidates = mine[np.abs(values[mine]) > model.reach(CANDIDATE_THRESHOLD)[jj]]
        if model.minimum:
            for k in candidates:
                acc.add(suspect(int(k)))
        elif model.rows_model and candidates.size:
            reaches = row_reach(residual[pair[candidates], jj], b[candidates], values[candidates])
            gaps = np.where(values[candidates] > 0, lone_gap(model, True), lone_gap(model, False))
            beyond = np.abs(values[candidates]) - reaches > gaps
            for k, r in zip(candidates[beyond].tolist(), reaches[beyond].tolist(), strict=True):
                acc.add_lone(suspect(k), r)
        for up in (True, False):
            side = mine[values[mine] > 0] if up else mine[values[mine] < 0]
            order = side[np.argsort(-np.abs(values[side]), kind="stable")[:EXTREMES]]
            for k in order:
                acc.offer(suspect(int(k)), up)
            if not model.minimum and model.rows_model:
                acc.column_tails(model.names[jj], up, keys.shape[2], b[side], np.abs(values[side]))


def _rows_of(keys: np.ndarray, tensors: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``keys[tensors, :, :, rows]`` (pairs, fields, blocks; contiguous), for pairs in tensor order (as
    np.nonzero gives them): taken along the rows axis a tensor at a time, several times faster than that
    fancy index."""
    out = np.empty((len(rows), *keys.shape[1:3]), keys.dtype)
    starts = np.flatnonzero(np.diff(tensors, prepend=-1)).tolist()
    for a, b in zip(starts, [*starts[1:], len(rows)], strict=True):
        out[a:b] = np.moveaxis(np.take(keys[int(tensors[a])], rows[a:b], axis=-1), -1, 0)
    return out


def row_reach(rows: np.ndarray, blocks: np.ndarray, values: np.ndarray) -> np.ndarray:
    """How far each candidate's row reaches without it, in the candidate's direction (keys, at least 0):
    ``rows`` (candidates, blocks per row) are their rows' residuals, ``blocks`` their positions."""
    others = np.nan_to_num(rows.astype(np.float64))
    others[np.arange(len(blocks)), blocks] = 0.0
    reach: np.ndarray = np.maximum(np.where(values > 0, others.max(axis=1), -others.min(axis=1)), 0.0)
    return reach


def lone_gap(model: GroupModel, up: bool) -> float:
    """How far (keys) a candidate of a ``d*q`` type stands beyond what its row and position reach to be
    flagged as lone."""
    return (LONE_UP if up else LONE_DOWN) * KEY_UNITS[model.encoding]


def lone_distance(model: GroupModel, acc: AnomalyAcc, s: Suspect, row_reach: float) -> float:
    """How far (keys) candidate ``s`` stands beyond both its row (``row_reach``, kept with it by
    :meth:`AnomalyAcc.add_lone`) and its position, which reaches as far as its COLUMN_RANK-th most extreme
    other block of the tensor in that direction, or its sampled rows, whichever is further."""
    assert model.column_reach is not None, "a model is fitted before it decides"
    up, level = s.residual > 0, abs(s.residual)
    position = s.unit % acc.per_row
    tops = acc.column_tops.get((s.field, up))
    others: list[float] = [] if tops is None else tops[position].tolist()
    if level in others:
        others.remove(level)
    column = others[COLUMN_RANK - 1] if len(others) >= COLUMN_RANK else 0.0
    sampled = float(model.column_reach[0 if up else 1, model.names.index(s.field), position])
    return level - max(row_reach, column, sampled)


def lonely(model: GroupModel, acc: AnomalyAcc, s: Suspect, row_reach: float) -> bool:
    """Whether candidate ``s`` stands more than :func:`lone_gap` beyond its row and its position
    (:func:`lone_distance`)."""
    return lone_distance(model, acc, s, row_reach) > lone_gap(model, s.residual > 0)


def _top_per_position(per_row: int, positions: np.ndarray, magnitudes: np.ndarray) -> np.ndarray:
    """(per_row, COLUMN_RANK + 1): the largest ``magnitudes`` at each position, largest first, 0 beyond."""
    out = np.zeros((per_row, COLUMN_RANK + 1))
    order = np.lexsort((-magnitudes, positions))
    at = positions[order]
    rank = np.arange(len(at)) - np.searchsorted(at, at, side="left")
    keep = rank <= COLUMN_RANK
    out[at[keep], rank[keep]] = magnitudes[order][keep]
    return out


def _positions(model: GroupModel) -> np.ndarray:
    assert model.positions is not None, "a model is fitted before it scores"
    return model.positions


def _wide_rows(keys: np.ndarray, positions: np.ndarray, reach: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(tensor, row) of the rows in which some field's keys, less their positions' effects, span more
    than its ``reach``: only those can hold a block that far from the row's median. The reductions run
    over a row's blocks in the column layout, whole vectors of rows at a time: first on the keys
    themselves (their span less the span of the position effects bounds the span wanted), then exactly,
    on the rows the bound keeps (on all rows at once when it keeps many)."""
    slack = positions.max(axis=-1) - positions.min(axis=-1)                   # tensors, fields
    span = keys.max(axis=-2).astype(np.int32) - keys.min(axis=-2)             # tensors, fields, rows
    tensors, rows = np.nonzero((span > (reach - slack)[..., None]).any(axis=1))
    if not rows.size or not slack.any():
        return tensors, rows
    if rows.size * 4 > keys.shape[0] * keys.shape[-1]:
        grid = keys.astype(np.float32)
        grid -= positions[..., None]
        exact = grid.max(axis=-2) - grid.min(axis=-2)
        tensors, rows = np.nonzero((exact > reach[..., None]).any(axis=1))
        return tensors, rows
    grid = keys[tensors, :, :, rows].astype(np.float32) - positions[tensors]   # pairs, fields, blocks
    wide = ((grid.max(axis=-1) - grid.min(axis=-1)) > reach[tensors]).any(axis=1)
    return tensors[wide], rows[wide]


def magnitude(model: GroupModel, key: float) -> float:
    """|x| of a (fractional) key of the model's encoding."""
    return float(_magnitudes(model, np.array([min(max(round(key), model.low), model.high - 1)]))[0])


def _magnitudes(model: GroupModel, keys: np.ndarray) -> np.ndarray:
    """|x| of each key (a sign-free bit pattern) of the model's encoding, as float64."""
    if model.encoding is Encoding.E8M0:
        return np.exp2(keys.astype(np.float64) - 127)
    if model.encoding is Encoding.BF16:
        return (keys.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if model.encoding is Encoding.F32:
        return keys.astype(np.uint32).view(np.float32).astype(np.float64)
    return keys.astype(np.uint16).view(np.float16).astype(np.float64)       # F16, IQ1_M's assembled f16


def _typical(model: GroupModel, keys: np.ndarray, clean: bool) -> np.ndarray:
    """The 1st and 99th percentile of |x| of the modelled keys (tensors, fields, n): (tensors, fields, 2);
    0 where a field has no modelled key."""
    n = keys.shape[-1]
    if clean:
        ranks = [(n - 1) // 100, (n - 1) * 99 // 100]
        return _magnitudes(model, np.partition(keys, ranks, axis=-1)[..., ranks])
    out = np.zeros((*keys.shape[:2], 2))
    for t, j in np.ndindex(*keys.shape[:2]):
        good = keys[t, j][(keys[t, j] >= model.low) & (keys[t, j] < model.high)]
        if good.size:
            ranks = [(good.size - 1) // 100, (good.size - 1) * 99 // 100]
            out[t, j] = _magnitudes(model, np.partition(good, ranks)[ranks])
    return out


@dataclass(frozen=True)
class Suspect:
    """A block whose scale the model questions: its unit (block index in the tensor), field and residual
    (keys); ``predicted`` is the key the model expected there."""

    unit: int
    field: str
    residual: float
    predicted: float


@dataclass
class AnomalyAcc:
    """Per tensor (or piece of one): the candidates of types with a minimum (to decode), the EXTREMES most
    extreme tail blocks of each field and direction of other types, and the keys of a row cut by the end
    of a slice (carried to the next). A tensor modelled whole keeps its keys as they are read (``kept``:
    group key -> [(first unit, keys)]) until all ``units`` have arrived, from one slice or from pieces
    merged in any order; :func:`settle` then fits and scores it (``fitted``) and drops them."""

    units: int = 0
    per_row: int = 1
    doubtful: list[Suspect] = field(default_factory=list)
    unchecked: int = 0           # candidates beyond MAX_DOUBTFUL, not decided
    extremes: dict[tuple[str, bool], list[Suspect]] = field(default_factory=dict)    # (field, upward)
    lone: list[tuple[Suspect, float]] = field(default_factory=list)     # with their row's reach
    column_tops: dict[tuple[str, bool], np.ndarray] = field(default_factory=dict)    # (field, upward)
    carry: dict[int, tuple[np.ndarray, int]] = field(default_factory=dict)
    kept: dict[int, list[tuple[int, np.ndarray]]] = field(default_factory=dict)
    waiting: dict[int, GroupModel] = field(default_factory=dict)
    fitted: dict[int, GroupModel] = field(default_factory=dict)

    def merge(self, other: AnomalyAcc) -> None:
        self.units, self.per_row = max(self.units, other.units), max(self.per_row, other.per_row)
        for s in other.doubtful:
            self.add(s)
        self.unchecked += other.unchecked
        for (_, up), found in other.extremes.items():
            for s in found:
                self.offer(s, up)
        for s, reach in other.lone:
            self.add_lone(s, reach)
        for (name, up), tops in other.column_tops.items():
            self._merge_tops(name, up, tops)
        self.waiting.update(other.waiting)
        self.fitted.update(other.fitted)
        for key, pieces in other.kept.items():
            self.kept.setdefault(key, []).extend(pieces)

    def add(self, s: Suspect) -> None:
        """A candidate to decode."""
        if len(self.doubtful) < MAX_DOUBTFUL:
            self.doubtful.append(s)
        else:
            self.unchecked += 1

    def add_lone(self, s: Suspect, row_reach: float) -> None:
        """A candidate of a ``d*q`` type that stands beyond its row (decided by :func:`lonely` once the
        tensor's positions are known)."""
        if len(self.lone) < MAX_DOUBTFUL:
            self.lone.append((s, row_reach))
        else:
            self.unchecked += 1

    def column_tails(self, name: str, up: bool, per_row: int, positions: np.ndarray, magnitudes: np.ndarray) -> None:
        """Tail blocks of field ``name`` in one direction: their positions and |residual|s."""
        if positions.size:
            self._merge_tops(name, up, _top_per_position(per_row, positions, magnitudes))

    def _merge_tops(self, name: str, up: bool, tops: np.ndarray) -> None:
        old = self.column_tops.get((name, up))
        if old is not None:
            tops = -np.sort(-np.concatenate([old, tops], axis=1), axis=1)[:, :COLUMN_RANK + 1]
        self.column_tops[(name, up)] = tops

    def offer(self, s: Suspect, up: bool) -> None:
        """A tail block: kept when it is among the EXTREMES most extreme of its field and direction (ties
        in file order, so the result does not depend on how the tensor was cut into pieces)."""
        found = self.extremes.setdefault((s.field, up), [])
        found.append(s)
        found.sort(key=lambda x: (-abs(x.residual), x.unit))
        del found[EXTREMES:]

    def keep(self, model: GroupModel, first_unit: int, keys: np.ndarray) -> None:
        """Keep a copy of ``keys`` (from unit ``first_unit``) of a tensor modelled whole."""
        self.waiting[model.key] = model
        self.kept.setdefault(model.key, []).append((first_unit, keys.copy()))

    def complete(self) -> list[tuple[GroupModel, np.ndarray]]:
        """The groups whose keys have all arrived, each with its keys (see :func:`columns`), taken out."""
        out: list[tuple[GroupModel, np.ndarray]] = []
        for key in [k for k, pieces in self.kept.items() if sum(len(p) for _, p in pieces) == self.units]:
            pieces = sorted(self.kept.pop(key), key=lambda piece: piece[0])
            keys = pieces[0][1] if len(pieces) == 1 else np.concatenate([p for _, p in pieces])
            out.append((self.waiting.pop(key), columns(keys, self.per_row)))
        return out


def settle(accs: Iterable[AnomalyAcc]) -> None:
    """Fit and score every tensor of ``accs`` whose keys have all arrived, tensors of one shape
    together (a fit has a fixed cost of some dozens of numpy calls, and a model has hundreds of small
    tensors of a few shapes)."""
    batches: dict[tuple[object, ...], list[tuple[AnomalyAcc, GroupModel, np.ndarray]]] = {}
    for acc in accs:
        for model, keys in acc.complete() if acc.kept else ():
            shape = (keys.shape, keys.dtype.str, model.encoding, model.low, model.high, model.rows_model, model.minimum)
            batches.setdefault(shape, []).append((acc, model, keys))
    for batch in batches.values():
        for part in range(0, len(batch), _BATCH):
            chunk = batch[part:part + _BATCH]
            keys = np.stack([k for _, _, k in chunk])
            models = fit([m for _, m, _ in chunk], keys)
            for (acc, _, _), model in zip(chunk, models, strict=True):
                acc.fitted[model.key] = model
            score(models, keys, [0] * len(chunk), [acc for acc, _, _ in chunk])


def _all_valid(model: GroupModel, keys: np.ndarray) -> bool:
    return int(keys.min()) >= model.low and int(keys.max()) < model.high


def _as_float(model: GroupModel, keys: np.ndarray, clean: bool) -> np.ndarray:
    """``keys`` as float32, NaN where they are outside [low, high) (zero or non-finite scales)."""
    grid = keys.astype(np.float32)
    if not clean:
        grid[(keys < model.low) | (keys >= model.high)] = np.nan
    return grid


def _medians(a: np.ndarray, clean: bool) -> np.ndarray:
    """Medians of ``a`` along its last axis, ignoring NaN (0 where all are NaN); ``clean``: there is none.
    A sort along a short contiguous axis is vectorised and several times faster than np.median's
    partition per row (np.nanmedian is slower still), and than np.partition along an axis of hundreds."""
    n = a.shape[-1]
    ordered = np.sort(a, axis=-1)        # NaN sorts last
    if clean:
        mid: np.ndarray = (ordered[..., (n - 1) // 2] + ordered[..., n // 2]) / 2
        return mid
    count = np.count_nonzero(~np.isnan(a), axis=-1)[..., None]
    lo = np.take_along_axis(ordered, np.maximum(count - 1, 0) // 2, axis=-1)[..., 0]
    hi = np.take_along_axis(ordered, np.minimum(count // 2, n - 1), axis=-1)[..., 0]
    medians: np.ndarray = np.where(count[..., 0] > 0, (lo + hi) / 2, 0.0).astype(a.dtype)
    return medians


def centering(decoded: np.ndarray) -> np.ndarray:
    """|median x| / max|x| of each block of ``decoded`` (n, block size); 0 for a block of zeros."""
    x = np.sort(np.asarray(decoded, dtype=np.float64), axis=1)   # not np.median: it imports numpy.ma
    n = x.shape[1]
    top = np.maximum(-x[:, 0], x[:, -1])
    mid = np.abs(x[:, (n - 1) // 2] + x[:, n // 2]) / 2
    result: np.ndarray = np.divide(mid, top, out=np.zeros_like(mid), where=top > 0)
    return result
