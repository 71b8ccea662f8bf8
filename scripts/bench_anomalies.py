#!/usr/bin/env python3
"""Measure `scan --anomalies` (ggaudit.scan.anomalies) on real GGUF models: false positives, recall, cost.

    python scripts/gather_real_models.py          # fetches the models into bench-data/real/
    python scripts/bench_anomalies.py [--trials 300] [--seed 1] [--e2e 20] [FILE...]

Clean pass: ``ggaudit.scan(model, anomalies=True)`` on each file, as it is published: every anomaly
finding is a false positive. Then, from the same models the scan fits, the highest and lowest score any
clean block reaches (every block scored exactly against its tensor's model) per model and field type,
and how close the clean candidates come to the second tests: the highest centering (types with a
minimum), the largest step from a candidate down to the next block in log2 units (other types).

Flip pass: per exponent bit 10..14 of an f16 scale, ``--trials`` times per field type a random tensor,
block and field has that bit flipped *in memory* (the files are opened read-only and never written):
its residual moves by exactly the change of its key, and the block goes through the scan's own decision
(centering of the flipped bytes decoded, or isolation among the field's clean extremes). One flip
cannot move a median fitted over thousands of blocks by more than one rank, so scoring it against the
clean fit is what a rescan gives. A flip that makes the scale zero or non-finite is the NaN/Inf scan's
business and is drawn again.
``--e2e N``: N flips per bit are also written into a scratch copy of the model (in a temporary folder),
scanned with ``ggaudit.scan(..., anomalies=True)`` and counted as found only when a finding names the
exact offset; the copy is restored after each flip.

Cost: wall time of ``scan(model, anomalies=True)`` against ``scan(model)`` in one process (best of
``--repeat``), and of the two commands as processes (``python -m ggaudit scan [--anomalies] FILE``).
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ggaudit
from ggaudit.format.affine import block_values
from ggaudit.format.blocks import Encoding
from ggaudit.scan.anomalies import KEY_UNITS
from ggaudit.scan import anomalies as A
from ggaudit.scan.kernel import Plan, groups, raw_units, unit_keys
from ggaudit.scan.run import make_plans
from ggaudit.scan.scales import _isolated as isolated, fit_plans
from bench_open import _best  # the same best-of-N timer as the other benchmarks

BITS = (10, 11, 12, 13, 14)


@dataclass
class Field:
    """One f16 scale field of one quantized tensor, with its exact clean residuals (keys)."""

    model: str
    plan: Plan
    group: A.GroupModel
    column: int
    keys: np.ndarray          # fields-free: (blocks per row, rows)
    residual: np.ndarray      # same shape
    blocks: np.ndarray        # (units, block bytes), a read-only view of the file
    tails: dict[bool, list[tuple[float, int]]]   # upward/downward: the most extreme (residual, unit) beyond the tail
    columns: dict[bool, np.ndarray]   # upward/downward: (blocks per row, rows) |residual| beyond the tail, else 0

    @property
    def name(self) -> str:
        return self.group.names[self.column]

    @property
    def type_key(self) -> str:
        return f"{self.plan.layout.name}.{self.name}"

    @property
    def spread(self) -> float:
        return float(self.group.spreads[self.column])    # type: ignore[index]

    def unit(self, b: int, row: int) -> int:
        return row * self.keys.shape[0] + b


def fields_of(path: Path) -> list[Field]:
    """Every modelled f16 field of every quantized tensor of ``path``, with the scan's own fit."""
    model = ggaudit.open_model(str(path))
    plans, _ = make_plans(list(model.tensors), set(), False)
    data = np.memmap(path, dtype=np.uint8, mode="r")
    out: list[Field] = []
    for plan in fit_plans(plans):
        if not plan.anomaly:
            continue
        bb = plan.layout.block_bytes
        blocks = np.asarray(data[plan.offset:plan.end]).reshape(-1, bb)
        by_key = {g.offset: g for g in groups(plan.layout)}
        for group in plan.anomaly:
            if group.encoding is not Encoding.F16:
                continue
            g = by_key[group.key]
            keys, _ = unit_keys(g, raw_units(g, blocks.reshape(-1), len(blocks), bb, False))
            grid = A.columns(keys.copy(), plan.units_per_row)
            fitted = group if group.positions is not None else A.fit([group], grid[None])[0]
            for j in range(len(group.names)):
                residual = _residual(fitted, grid, j)
                tails = _tails(residual, float(fitted.spreads[j]))      # type: ignore[index]
                beyond = np.nan_to_num(residual) * (np.abs(np.nan_to_num(residual)) > A.TAIL_THRESHOLD
                                                     * float(fitted.spreads[j]))   # type: ignore[index]
                columns = {True: np.maximum(beyond, 0), False: np.maximum(-beyond, 0)}
                out.append(Field(path.name, plan, fitted, j, grid[j], residual, blocks, tails, columns))
    return out


def _tails(residual: np.ndarray, spread: float) -> dict[bool, list[tuple[float, int]]]:
    """Per direction, the EXTREMES + 1 most extreme (residual, unit) beyond the tail threshold."""
    out: dict[bool, list[tuple[float, int]]] = {}
    flat = np.nan_to_num(residual.T.ravel())           # unit order: row by row
    for up in (True, False):
        side = np.flatnonzero(flat > A.TAIL_THRESHOLD * spread if up else flat < -A.TAIL_THRESHOLD * spread)
        order = side[np.argsort(-np.abs(flat[side]), kind="stable")[:A.EXTREMES + 1]]
        out[up] = [(float(flat[u]), int(u)) for u in order]
    return out


def _residual(model: A.GroupModel, grid: np.ndarray, j: int) -> np.ndarray:
    g = grid[j].astype(np.float64)
    g[(grid[j] < model.low) | (grid[j] >= model.high)] = np.nan
    g -= model.positions[j][:, None]                    # type: ignore[index]
    if model.rows_model:
        g -= np.nanmedian(g, axis=0)[None, :]
    return g


def lone_distance(f: Field, b: int, r: int, residual: float) -> float:
    """How far (keys) block (b, r) with this residual stands beyond its row and its position, measured by
    the scan's own :func:`ggaudit.scan.anomalies.lone_distance` (the other blocks as they are in the clean
    file, the block itself among its position's tail blocks with this residual, as the scan has it)."""
    up, per_row = residual > 0, f.keys.shape[0]
    column = f.columns[up][b].copy()
    column[r] = abs(residual)
    held = np.flatnonzero(column)
    acc = A.AnomalyAcc(per_row=per_row)
    acc.column_tails(f.name, up, per_row, np.full(held.size, b), column[held])
    reach = float(A.row_reach(f.residual[:, r][None], np.array([b]), np.array([residual]))[0])
    return A.lone_distance(f.group, acc, A.Suspect(unit=f.unit(b, r), field=f.name, residual=residual,
                                                   predicted=0.0), reach)


def decide(f: Field, b: int, r: int, residual: float, block: np.ndarray) -> bool:
    """The scan's decision for block (b, r) of ``f`` with this residual and these bytes: centering for a
    type with a minimum, standing alone in its row and position for the others, and isolation among the
    field's most extreme blocks of that direction."""
    spread = f.spread
    if abs(residual) <= A.CANDIDATE_THRESHOLD * spread:
        return False
    if f.group.minimum:
        decoded = block_values(block, f.plan.layout.ggml_type)
        if A.centering(decoded)[0] > A.CENTERING_THRESHOLD:
            return True
    elif f.group.rows_model and lone_distance(f, b, r, residual) > A.lone_gap(f.group, residual > 0):
        return True
    up = residual > 0
    others = [(v, unit) for v, unit in f.tails[up] if unit != f.unit(b, r)]
    found = sorted([A.Suspect(unit=unit, field=f.name, residual=v, predicted=0.0) for v, unit in others]
                   + [A.Suspect(unit=-1, field=f.name, residual=residual, predicted=0.0)],
                   key=lambda s: (-abs(s.residual), s.unit))[:A.EXTREMES]
    return any(s.unit == -1 for s in isolated(f.group, found))


def clean_pass(files: list[Path], fields: list[Field]) -> None:
    print("clean pass: ggaudit.scan(model, anomalies=True) on the published files")
    for path in files:
        report = ggaudit.scan(str(path), anomalies=True, limit=1000)
        found = [(t.name, f.row, f.block, f.field, round(f.score or 0, 1)) for t in report.tensors for f in t.findings
                 if f.kind == "anomaly"]
        print(f"  {path.name:44} anomaly findings (false positives): {report.counts['anomaly']}"
              + (f"  e.g. {found[:3]}" if found else "") + (f"  warnings: {list(report.warnings)}" if report.warnings
                                                              else ""))
    print("  extremes of clean blocks (score = residual / spread), and the second tests on them: the highest "
          "centering of a candidate (types with a minimum), the largest step below a candidate in log2 units "
          "(other types; flagged above GAP_UP / GAP_DOWN) and the furthest a candidate stands beyond its row "
          "and position (other types; flagged above LONE_UP / LONE_DOWN)")
    best: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0])
    steps: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    lone: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for f in fields:
        s = f.residual / f.spread
        k = (f.model, f.type_key)
        best[k][0], best[k][1] = max(best[k][0], float(np.nanmax(s))), min(best[k][1], float(np.nanmin(s)))
        cand = np.argwhere(np.abs(np.nan_to_num(s)) > A.CANDIDATE_THRESHOLD)
        best[k][3] += len(cand)
        if f.group.minimum and len(cand):
            units = [f.unit(int(b), int(r)) for b, r in cand]
            decoded = block_values(f.blocks[units], f.plan.layout.ggml_type)
            best[k][2] = max(best[k][2], float(A.centering(decoded).max()))
        elif f.group.rows_model:
            for b, r in cand:
                v = float(f.residual[b, r])
                far = lone_distance(f, int(b), int(r), v) / KEY_UNITS[Encoding.F16]
                lone[k][0 if v > 0 else 1] = max(lone[k][0 if v > 0 else 1], far)
        for up, tail in f.tails.items():
            levels = [abs(v) for v, _ in tail[:A.EXTREMES]]
            if len(tail) < A.EXTREMES:      # as the scan: the tail's edge only after a list not full
                levels.append(A.TAIL_THRESHOLD * f.spread)
            found = [levels[j] - levels[j + 1] for j in range(len(levels) - 1)
                     if levels[j] > A.CANDIDATE_THRESHOLD * f.spread]
            if found:
                steps[k][0 if up else 1] = max(steps[k][0 if up else 1], max(found) / KEY_UNITS[Encoding.F16])
    for (model, key), (top, bottom, centred, n) in sorted(best.items()):
        minimum = key.split(".")[0] in ("Q4_1", "Q5_1", "Q2_K", "Q4_K", "Q5_K")
        check = f"largest step up {steps[(model, key)][0]:.2f}, down {steps[(model, key)][1]:.2f}"
        if minimum:
            check = f"top centering {centred:.3f}; " + check
        else:
            check += f"; furthest alone up {lone[(model, key)][0]:.2f}, down {lone[(model, key)][1]:.2f}"
        print(f"  {model:44} {key:10} max {top:6.2f} min {bottom:6.2f}  candidates {n:6}  {check}")


def flip_pass(fields: list[Field], trials: int, rng: np.random.Generator) -> None:
    by_type: dict[str, list[Field]] = defaultdict(list)
    for f in fields:
        by_type[f.type_key].append(f)
    print(f"flip pass: {trials} flips per exponent bit and field type (found: the scan's decision flags it)")
    print("  " + f"{'field':10}" + "".join(f"  bit {b:2}" for b in BITS) + "  (found up / down)")
    totals = {b: [0, 0] for b in BITS}
    for key, group in sorted(by_type.items()):
        row, notes = [], []
        for bit in BITS:
            found = {True: [0, 0], False: [0, 0]}
            for _ in range(trials):
                f, b, r, new = _draw(group, bit, rng)
                old = int(f.keys[b, r])
                unit = f.unit(b, r)
                block = f.blocks[unit].copy()
                field = f.plan.layout.fields[[x.name for x in f.plan.layout.fields].index(f.name)]
                sign = int(block[field.offset:field.offset + 2].view("<u2")[0]) & 0x8000
                block[field.offset:field.offset + 2] = np.array([new | sign], "<u2").view(np.uint8)
                up = new > old
                found[up][0] += decide(f, b, r, float(f.residual[b, r]) + new - old, block)
                found[up][1] += 1
            hits = found[True][0] + found[False][0]
            totals[bit][0] += hits
            totals[bit][1] += trials
            row.append(hits / trials)
            notes.append(f"{found[True][0]}/{found[True][1]} {found[False][0]}/{found[False][1]}")
        print("  " + f"{key:10}" + "".join(f"  {x:6.1%}" for x in row) + "  (" + ", ".join(notes) + ")")
    print("  " + f"{'all':10}" + "".join(f"  {totals[b][0] / totals[b][1]:6.1%}" for b in BITS)
          + "  (each field type alike)")
    models = sorted({f.model for f in fields})
    for model in models:
        mine = [f for f in fields if f.model == model]
        weights = np.array([f.keys.size for f in mine], float)
        row = []
        for bit in BITS:
            hits = 0
            for _ in range(trials):
                f = mine[int(rng.choice(len(mine), p=weights / weights.sum()))]
                f, b, r, new = _draw([f], bit, rng)
                unit = f.unit(b, r)
                block = f.blocks[unit].copy()
                field = f.plan.layout.fields[[x.name for x in f.plan.layout.fields].index(f.name)]
                sign = int(block[field.offset:field.offset + 2].view("<u2")[0]) & 0x8000
                block[field.offset:field.offset + 2] = np.array([new | sign], "<u2").view(np.uint8)
                hits += decide(f, b, r, float(f.residual[b, r]) + new - int(f.keys[b, r]), block)
            row.append(hits / trials)
        print("  " + f"{model[:10]:10}" + "".join(f"  {x:6.1%}" for x in row)
              + "  (a random block scale of this model)")


def _draw(group: list[Field], bit: int, rng: np.random.Generator) -> tuple[Field, int, int, int]:
    """A random field, block and flipped key that stays finite and non-zero."""
    while True:
        f = group[int(rng.integers(len(group)))]
        b, r = int(rng.integers(f.keys.shape[0])), int(rng.integers(f.keys.shape[1]))
        old = int(f.keys[b, r])
        new = old ^ (1 << bit)
        if 0 < old < 0x7C00 and 0 < new < 0x7C00 and not np.isnan(f.residual[b, r]):
            return f, b, r, new


def e2e_pass(files: list[Path], fields: list[Field], per_bit: int, rng: np.random.Generator) -> None:
    print(f"end to end: {per_bit} flips per bit written into a scratch copy of each model and scanned")
    for path in files:
        mine = [f for f in fields if f.model == path.name]
        if not mine:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / path.name
            shutil.copyfile(path, copy)
            results = []
            for bit in BITS:
                hits = 0
                for _ in range(per_bit):
                    f, b, r, new = _draw(mine, bit, rng)
                    field = f.plan.layout.fields[[x.name for x in f.plan.layout.fields].index(f.name)]
                    offset = f.plan.offset + f.unit(b, r) * f.plan.layout.block_bytes + field.offset
                    with open(copy, "r+b") as fh:
                        fh.seek(offset)
                        stored = fh.read(2)
                        fh.seek(offset)
                        fh.write(np.array([new | (int.from_bytes(stored, "little") & 0x8000)], "<u2").tobytes())
                    report = ggaudit.scan(str(copy), tensors=[f.plan.name], anomalies=True, limit=100)
                    hits += any(x.offset == offset and x.kind == "anomaly" for t in report.tensors for x in t.findings)
                    with open(copy, "r+b") as fh:
                        fh.seek(offset)
                        fh.write(stored)
                results.append(f"bit {bit}: {hits}/{per_bit}")
            print(f"  {path.name:44} " + ", ".join(results))


def cost(files: list[Path], repeat: int) -> None:
    print(f"cost (best of {repeat}): scan with anomalies against a plain scan of the same model")
    for path in files:
        model = ggaudit.open_model(str(path))
        plain = _best(functools.partial(ggaudit.scan, model), repeat)
        with_anomalies = _best(functools.partial(ggaudit.scan, model, anomalies=True), repeat)
        cli = [sys.executable, "-m", "ggaudit", "scan", str(path)]
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        cli_plain = _best(functools.partial(subprocess.run, cli, capture_output=True, env=env), repeat)
        cli_anom = _best(functools.partial(subprocess.run, [*cli, "--anomalies"], capture_output=True, env=env),
                         repeat)
        print(f"  {path.name:44} library {with_anomalies * 1e3:7.1f} ms / {plain * 1e3:7.1f} ms = "
              f"{with_anomalies / plain:4.2f}x   command {cli_anom * 1e3:7.1f} ms / {cli_plain * 1e3:7.1f} ms = "
              f"{cli_anom / cli_plain:4.2f}x")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--trials", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--e2e", type=int, default=0, help="flips per bit scanned end to end in a scratch copy")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--skip", nargs="*", default=(), choices=("clean", "flips", "cost"))
    args = parser.parse_args()
    files = args.files or sorted((Path(__file__).resolve().parents[1] / "bench-data" / "real").glob("*.gguf"))
    if not files:
        print("no models: run scripts/gather_real_models.py first", file=sys.stderr)
        return 2
    fields = [f for path in files for f in fields_of(path)]
    rng = np.random.default_rng(args.seed)
    if "clean" not in args.skip:
        clean_pass(files, fields)
    if "flips" not in args.skip:
        flip_pass(fields, args.trials, rng)
    if args.e2e:
        e2e_pass(files, fields, args.e2e, rng)
    if "cost" not in args.skip:
        cost(files, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
