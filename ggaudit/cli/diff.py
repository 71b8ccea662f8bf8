"""``ggaudit diff``: compare two models tensor by tensor; exit 0 same, 1 different, 2 unreadable."""

from __future__ import annotations

import dataclasses
from typing import Any

import click

from ..verify.diff import DiffReport, TensorDataDiff, diff_paths
from ..verify.diff_meta import MetadataChange
from ..format.info import value_to_json
from ..format.locate import resolve_model
from ..text import escape, escape_path
from .common import EXIT_CLEAN, EXIT_FINDINGS, PathParam, emit_json, handle_errors, show_value


@click.command()
@click.argument("a")
@click.argument("b")
@click.option("--store", type=PathParam(file_okay=False), help="Ollama store root for ollama:NAME.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--fail-fast", is_flag=True, help="Stop at the first tensor whose data differ.")
@handle_errors
def diff(a: str, b: str, store: str | None, as_json: bool, fail_fast: bool) -> None:
    """Compare models A and B (files, split sets, or ollama:NAME): metadata keys only in one or with
    another type or value (for arrays, the first differing element), tensors only in one, type or shape
    changes, and for differing data the first differing byte and the number of differing rows."""
    report = diff_paths(resolve_model(a, store=store)[0], resolve_model(b, store=store)[0],
                        fail_fast=fail_fast)
    if as_json:
        emit_json(report_to_json(report))
    else:
        for line in render_diff(report):
            click.echo(line)
    raise SystemExit(EXIT_CLEAN if report.same else EXIT_FINDINGS)


def report_to_json(report: DiffReport) -> dict[str, Any]:
    doc = dataclasses.asdict(report)
    for entry in doc["data_diffs"]:
        first = entry["first"]
        first["raw_a"], first["raw_b"] = first["raw_a"].hex(), first["raw_b"].hex()
    doc["metadata"] = [_change_to_json(c) for c in report.metadata]
    doc["same"] = report.same
    return doc


def _change_to_json(c: MetadataChange) -> dict[str, Any]:
    doc = dataclasses.asdict(c)
    for side in ("value_a", "value_b", "element_a", "element_b"):
        doc[side] = value_to_json(getattr(c, side))
    return doc


def describe_metadata_change(c: MetadataChange) -> str:
    key = escape(c.key)
    if c.what == "only-in-a":
        return f"ONLY-IN-A metadata {key} ({c.type_a}) = {show_value(c.value_a)}"
    if c.what == "only-in-b":
        return f"ONLY-IN-B metadata {key} ({c.type_b}) = {show_value(c.value_b)}"
    if c.what == "type":
        return f"CHANGED metadata {key}: type: {c.type_a} -> {c.type_b}"
    line = f"CHANGED metadata {key}: value: {show_value(c.value_a)} -> {show_value(c.value_b)}"
    if c.element is not None:
        gone = "(none)"
        line += (f", first at element {c.element}: "
                 f"{gone if c.element_a is None else show_value(c.element_a)} -> "
                 f"{gone if c.element_b is None else show_value(c.element_b)}")
    return line


def _shape(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(n) for n in shape) + "]"


def describe_data_diff(d: TensorDataDiff) -> list[str]:
    """fio style: where (files, offsets, length; tensor, row, block, column), then A before B in hex."""
    f = d.first
    cols = f"column {f.column}" if f.columns == 1 else f"columns {f.column}-{f.column + f.columns - 1}"
    return [
        f"DIFFER tensor {escape(d.name)} ({d.ggml_type} {_shape(d.shape)}): {d.rows_differing} of {d.n_rows} "
        f"rows differ",
        f"  first at row {f.row}, block {f.block}, {cols}, byte {f.byte_in_block} of the {f.block_bytes}-byte block",
        f"  a: file {escape_path(d.path_a)}, offset {f.offset_a}, length {f.block_bytes}",
        f"  b: file {escape_path(d.path_b)}, offset {f.offset_b}, length {f.block_bytes}",
        f"  expected (a): {f.raw_a.hex()}",
        f"  actual   (b): {f.raw_b.hex()}",
    ]


def render_diff(report: DiffReport) -> list[str]:
    lines = [f"diff a: {escape_path(report.a)}", f"diff b: {escape_path(report.b)}"]
    lines.extend(describe_metadata_change(c) for c in report.metadata)
    lines.extend(f"ONLY-IN-A tensor {escape(name)}" for name in report.only_in_a)
    lines.extend(f"ONLY-IN-B tensor {escape(name)}" for name in report.only_in_b)
    for c in report.layout_changes:
        lines.append(f"CHANGED tensor {escape(c.name)}: {c.what}: {c.type_a} {_shape(c.shape_a)} -> "
                     f"{c.type_b} {_shape(c.shape_b)}")
    for d in report.data_diffs:
        lines.extend(describe_data_diff(d))
    stop = " (stopped at the first difference)" if report.stopped_early else ""
    lines.append(f"summary: {len(report.identical)} identical, {len(report.data_diffs)} differ, "
                 f"{len(report.layout_changes)} changed type or shape, {len(report.only_in_a)} only in a, "
                 f"{len(report.only_in_b)} only in b, {len(report.metadata)} metadata keys differ{stop}")
    return lines
