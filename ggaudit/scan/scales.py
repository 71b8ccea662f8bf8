"""The scale-anomaly check around the scan (``scan(..., anomalies=True)``): planning and the findings.

:func:`fit_plans` gives each quantized tensor the scale models of its field groups
(:mod:`ggaudit.scan.anomalies`). A tensor of up to COLLECT_MAX_BLOCKS blocks keeps its keys as the scan
reads them and is modelled whole once they have all arrived. A larger one is fitted first, on 16 strips
of its rows spread through the tensor (a sixteenth of its rows, at most 4,096: position effects and the
spread are medians, which such a sample gives as well as the whole), and its rows are scored as they are
read, so memory stays bounded. Either way the work happens wherever the scan runs (in this process, in
reader processes, on a cluster). After the scan, :func:`anomaly_findings` decodes the few blocks the
scores left in doubt (read one by one) and turns what the model flags into findings.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

import numpy as np

from ..io import opening, positioned
from ..format.affine import block_values
from ..format.blocks import Encoding, FloatField, decode_bits, field_bits
from .anomalies import (CANDIDATE_THRESHOLD, CENTERING_THRESHOLD, COLLECT_MAX_BLOCKS, EXTREMES, GAP_DOWN,
                        GAP_DOWN_MINIMUM, GAP_UP, GAP_UP_MINIMUM, KEY_UNITS, MAX_DOUBTFUL, TAIL_THRESHOLD,
                        GroupModel, Suspect, centering, columns, fit, has_minimum, lonely, magnitude, unfitted)
from .kernel import Acc, Plan, finding_at, groups, raw_units, unit_keys
from .report import CAUSE_STATISTIC, Finding, hex_bits

__all__ = ["anomaly_findings", "fit_plans", "modelled"]

#: Strips of rows the fit of a large tensor reads, and the rows they hold together (at most; a sixteenth
#: of the tensor's rows when that is fewer, but never fewer than MIN_SAMPLE_ROWS).
STRIPS = 16
MAX_SAMPLE_ROWS = 1 << 12
MIN_SAMPLE_ROWS = 256


def modelled(plan: Plan) -> bool:
    """Whether ``plan``'s tensor has block scales the model applies to."""
    return not plan.layout.is_float_elements and any(f.encoding in KEY_UNITS for f in plan.layout.fields)


def fit_plans(plans: Sequence[Plan]) -> list[Plan]:
    """``plans`` with the scale models of their tensors fitted (``Plan.anomaly``), reading each file
    through one read-only descriptor."""
    out: list[Plan] = []
    fds: dict[str, int] = {}
    try:
        for plan in plans:
            if not modelled(plan) or not plan.units:
                out.append(plan)
                continue
            models = _unfitted(plan)
            if plan.units > COLLECT_MAX_BLOCKS:
                fd = fds.get(plan.path)
                if fd is None:
                    fd = fds[plan.path] = opening.open_fd(plan.path)
                models = _fit(plan, models, fd)
            out.append(dataclasses.replace(plan, anomaly=models))
    finally:
        for fd in fds.values():
            os.close(fd)
    return out


def _unfitted(plan: Plan) -> tuple[GroupModel, ...]:
    minimum = has_minimum(plan.layout)
    return tuple(unfitted(g.offset, [f.name for f in g.fields], g.codec.encoding, g.codec.inf_key,
                          plan.units_per_row, minimum) for g in groups(plan.layout) if g.codec.encoding in KEY_UNITS)


def _sample_rows(n_rows: int) -> list[tuple[int, int]]:
    """(first row, rows) of each strip the fit reads."""
    want = min(n_rows, MAX_SAMPLE_ROWS, max(MIN_SAMPLE_ROWS, n_rows // 16))
    per = max(1, want // STRIPS)
    strips: list[tuple[int, int]] = []
    for start in np.linspace(0, n_rows - per, STRIPS).astype(int).tolist():
        if not strips or start >= strips[-1][0] + strips[-1][1]:
            strips.append((start, per))
    return strips


def _fit(plan: Plan, models: tuple[GroupModel, ...], fd: int) -> tuple[GroupModel, ...]:
    """``models`` fitted on strips of the tensor's rows."""
    bb, per_row = plan.layout.block_bytes, plan.units_per_row
    pieces: list[np.ndarray] = []
    for first, rows in _sample_rows(plan.units // per_row):
        buf = np.empty(rows * per_row * bb, np.uint8)
        positioned.pread_exact(fd, plan.path, buf.data, plan.offset + first * per_row * bb)
        pieces.append(buf)
    data = np.concatenate(pieces)
    n = len(data) // bb
    by_key = {g.offset: g for g in groups(plan.layout)}
    fitted: list[GroupModel] = []
    for model in models:
        keys, _ = unit_keys(by_key[model.key], raw_units(by_key[model.key], data, n, bb, False))
        fitted.extend(fit([model], columns(keys, per_row)[None], rows=MAX_SAMPLE_ROWS))
    return tuple(fitted)


def anomaly_findings(plan: Plan, acc: Acc) -> tuple[list[Finding], list[str]]:
    """The anomalies of one scanned tensor, in file order, and warnings (candidates left undecided).

    Candidates of a type with a minimum are read again (one block each) and decoded; for other types,
    the most extreme block of each field and direction is flagged when it stands apart from the next."""
    state = acc.anomaly
    if state is None or plan.anomaly is None:
        return [], []
    models = {m.key: m for m in plan.anomaly if m.positions is not None} | state.fitted
    by_field = {name: m for m in models.values() for name in m.names}
    chosen = {s for (name, _), found in state.extremes.items() for s in _isolated(by_field[name], found)}
    chosen.update(s for s, reach in state.lone if lonely(by_field[s.field], state, s, reach))
    blocks = _read_blocks(plan, sorted({s.unit for s in [*chosen, *state.doubtful]}))
    if state.doubtful:
        decoded = block_values(np.stack([blocks[s.unit] for s in state.doubtful]), plan.layout.ggml_type)
        off_centre = centering(decoded) > CENTERING_THRESHOLD
        chosen.update(s for s, yes in zip(state.doubtful, off_centre, strict=True) if yes)
    fields = {f.name: f for f in plan.layout.fields}
    findings = [_finding(plan, s, fields[s.field], by_field[s.field], blocks[s.unit])
                for s in sorted(chosen, key=lambda s: (s.unit, s.field))]
    return findings, _unchecked(plan, state.unchecked)


def _isolated(model: GroupModel, found: list[Suspect]) -> list[Suspect]:
    """The blocks of ``found`` (a field's most extreme tail blocks in one direction, most extreme first)
    above the first step down of more than GAP_UP / GAP_DOWN log2 units (after the last: to the tail's
    edge, unless the list is full and what follows it unknown); only candidates count."""
    spread = model.spread(found[0].field)
    up = found[0].residual > 0
    steps = (GAP_UP_MINIMUM, GAP_DOWN_MINIMUM) if model.minimum else (GAP_UP, GAP_DOWN)
    gap = (steps[0] if up else steps[1]) * KEY_UNITS[model.encoding]
    levels = [abs(s.residual) for s in found]
    if len(found) < EXTREMES:
        levels.append(TAIL_THRESHOLD * spread)
    for i in range(len(levels) - 1):
        if levels[i] - levels[i + 1] > gap:
            return [s for s in found[:i + 1] if abs(s.residual) > CANDIDATE_THRESHOLD * spread]
    return []


def _unchecked(plan: Plan, n: int) -> list[str]:
    if not n:
        return []
    return [f"anomalies: {n} block{'s' if n > 1 else ''} of {plan.name} left undecided "
            f"(more than {MAX_DOUBTFUL} blocks were in doubt)"]


def _read_blocks(plan: Plan, units: list[int]) -> dict[int, np.ndarray]:
    """The bytes of each block ``units`` of the plan's tensor, read one by one."""
    bb = plan.layout.block_bytes
    out: dict[int, np.ndarray] = {}
    if not units:
        return out
    fd = opening.open_fd(plan.path)
    try:
        for unit in units:
            buf = np.empty(bb, np.uint8)
            positioned.pread_exact(fd, plan.path, buf.data, plan.offset + unit * bb)
            out[unit] = buf
    finally:
        os.close(fd)
    return out


def _finding(plan: Plan, s: Suspect, f: FloatField, model: GroupModel, block: np.ndarray) -> Finding:
    """The scan's finding for the block (located as any finding is), with the model's figures."""
    bits = int(field_bits(f, block[f.offset:f.offset + f.size].reshape(1, -1))[0])
    value = float(decode_bits(f.encoding, np.array([bits], np.uint64))[0])
    offset = plan.offset + s.unit * plan.layout.block_bytes + f.offset
    shown = hex_bits(bits, 2 if f.encoding is Encoding.IQ1M_F16 else f.size)     # IQ1_M: the assembled f16
    located = finding_at(plan, s.unit, f, offset, shown, value, "anomaly", CAUSE_STATISTIC)
    return dataclasses.replace(located, score=s.residual / model.spread(f.name),
                               expected=magnitude(model, s.predicted),
                               typical=model.typical[model.names.index(f.name)])
