"""``ggaudit verify``: digests against the Ollama store, the Hugging Face cache, checksum files, a
blob's own name, or a tensor manifest. Exit 0 all good, 1 mismatches, 2 unreadable input."""

from __future__ import annotations

import dataclasses
from typing import Any

import click

from ..batch import run_models
from ..errors import UsageError
from ..format.locate import OLLAMA_PREFIX, resolve_model
from ..text import escape, escape_path
from ..verify.run import (Mismatch, VerifyReport, verify_blob, verify_hf, verify_ollama, verify_sums,
                          verify_tensor_manifest)
from .common import PathParam, emit_outcomes, handle_errors, hint

HF_PREFIX = "hf:"


@click.command()
@click.argument("targets", nargs=-1)
@click.option("--ollama", "ollama_name", metavar="NAME", help="Verify an Ollama model (same as ollama:NAME).")
@click.option("--store", type=PathParam(file_okay=False), help="Ollama store root (default: $OLLAMA_MODELS "
              "or the platform default).")
@click.option("--sums", type=PathParam(dir_okay=False), help="Verify the files a sha256 checksum file names.")
@click.option("--manifest", "manifest_file", type=PathParam(dir_okay=False),
              help="Verify TARGET against a tensor manifest written by `ggaudit manifest`.")
@click.option("--jobs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Verify this many TARGETs at once.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--fail-fast", is_flag=True, help="Stop at the first mismatch.")
@handle_errors
def verify(targets: tuple[str, ...], ollama_name: str | None, store: str | None, sums: str | None,
           manifest_file: str | None, jobs: int, as_json: bool, fail_fast: bool) -> None:
    """Check the bytes of each TARGET against the digests they should have.

    \b
    TARGET is one of:
      ollama:NAME        every layer and the config of an Ollama model
      hf:ORG/NAME[@REV]  a Hugging Face cache snapshot, offline
      FILE               a blob named by its sha256 (sha256-<hex>), or with --manifest a model
    Several TARGETs are reported one after the other; a failure in one does not lose the others.

    Exit 0 all good, 1 mismatches, 2 unreadable input. A file the expectations say should exist
    (an Ollama layer, a shard, a sums entry, TARGET itself with --manifest or as a blob) and that is
    absent is a "missing" mismatch: exit 1.
    """
    items = list(targets) + ([OLLAMA_PREFIX + ollama_name] if ollama_name is not None else [])
    if sums is not None:
        if items or manifest_file is not None:
            raise UsageError(None, "--sums FILE takes no TARGET and no --manifest")
        outcomes = run_models([sums], lambda path: verify_sums(path, fail_fast=fail_fast))
    elif not items:
        raise UsageError(None, "give a TARGET, --ollama NAME or --sums FILE")
    else:
        outcomes = run_models(items, lambda t: _verify_one(t, store, manifest_file, fail_fast), jobs=jobs)
    for outcome in outcomes:
        for warning in outcome.result.warnings if outcome.result is not None else ():
            hint(f"ggaudit: warning: {escape(warning)}")
    raise SystemExit(emit_outcomes(outcomes, as_json=as_json, to_json=report_to_json, render=render_report,
                                   has_findings=lambda r: not r.ok))


def _verify_one(target: str, store: str | None, manifest_file: str | None, fail_fast: bool) -> VerifyReport:
    if manifest_file is not None:
        model = resolve_model(target, store=store)[0]
        return verify_tensor_manifest(model, manifest_file, fail_fast=fail_fast)
    if target.startswith(OLLAMA_PREFIX):
        return verify_ollama(target[len(OLLAMA_PREFIX):], store, fail_fast=fail_fast)
    if target.startswith(HF_PREFIX):
        return verify_hf(target[len(HF_PREFIX):], fail_fast=fail_fast)
    return verify_blob(target)


def report_to_json(report: VerifyReport) -> dict[str, Any]:
    doc = dataclasses.asdict(report)
    doc["ok"] = report.ok
    return doc


def describe_mismatch(m: Mismatch) -> list[str]:
    """fio style: where (file, offset, length; tensor, rows), what, then expected before actual."""
    where = [f"file {escape_path(m.path)}"]
    if m.offset is not None:
        where.append(f"offset {m.offset}")
    if m.length is not None:
        where.append(f"length {m.length}")
    place = ", ".join(where)
    if m.tensor is not None:
        place += f"; tensor {escape(m.tensor)}"
        if m.rows is not None:
            place += f", rows {m.rows[0]}-{m.rows[1]}"
    elif m.subject:
        place += f" ({escape(m.subject)})"
    lines = [f"MISMATCH {m.kind}: {place}: {escape(m.detail)}"]
    if m.expected is not None or m.actual is not None:
        lines.append(f"  expected: {escape(m.expected or '-')}")
        lines.append(f"  actual:   {escape(m.actual or '-')}")
    return lines


def render_report(report: VerifyReport) -> list[str]:
    lines = [f"verify {report.kind}: {escape_path(report.source)}"]
    for item in report.checked:
        if item.ok:
            lines.append(f"ok {item.algorithm} {item.digest}: file {escape_path(item.path)}, {item.size} bytes "
                         f"({escape(item.subject)})")
    for m in report.mismatches:
        lines.extend(describe_mismatch(m))
    stop = " (stopped at the first mismatch)" if report.stopped_early else ""
    lines.append(f"summary: {report.stats.files} files hashed, {report.stats.bytes_hashed} bytes, "
                 f"{len(report.mismatches)} mismatches{stop}")
    return lines
