"""``ggaudit verify``: digests against the Ollama store, the Hugging Face cache, checksum files, a
blob's own name, or a tensor manifest. Exit 0 all good, 1 mismatches, 2 unreadable input."""

from __future__ import annotations

import dataclasses
from typing import Any

import click

from ..errors import UsageError
from ..locate import OLLAMA_PREFIX, resolve_model
from ..text import escape
from ..verify import (Mismatch, VerifyReport, verify_blob, verify_hf, verify_ollama, verify_sums,
                      verify_tensor_manifest)
from .common import EXIT_CLEAN, EXIT_FINDINGS, emit_json, handle_errors, hint

HF_PREFIX = "hf:"


@click.command()
@click.argument("target", required=False)
@click.option("--ollama", "ollama_name", metavar="NAME", help="Verify an Ollama model (same as ollama:NAME).")
@click.option("--store", type=click.Path(file_okay=False), help="Ollama store root (default: $OLLAMA_MODELS "
              "or the platform default).")
@click.option("--sums", type=click.Path(dir_okay=False), help="Verify the files a sha256 checksum file names.")
@click.option("--manifest", "manifest_file", type=click.Path(dir_okay=False),
              help="Verify TARGET against a tensor manifest written by `ggaudit manifest`.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--fail-fast", is_flag=True, help="Stop at the first mismatch.")
@handle_errors
def verify(target: str | None, ollama_name: str | None, store: str | None, sums: str | None,
           manifest_file: str | None, as_json: bool, fail_fast: bool) -> None:
    """Check TARGET's bytes against the digests they should have.

    \b
    TARGET is one of:
      ollama:NAME        every layer and the config of an Ollama model
      hf:ORG/NAME[@REV]  a Hugging Face cache snapshot, offline
      FILE               a blob named by its sha256 (sha256-<hex>), or with --manifest a model
    """
    report = _run(target, ollama_name, store, sums, manifest_file, fail_fast)
    for warning in report.warnings:
        hint(f"ggaudit: warning: {escape(warning)}")
    if as_json:
        emit_json(report_to_json(report))
    else:
        for line in render_report(report):
            click.echo(line)
    raise SystemExit(EXIT_CLEAN if report.ok else EXIT_FINDINGS)


def _run(target: str | None, ollama_name: str | None, store: str | None, sums: str | None,
         manifest_file: str | None, fail_fast: bool) -> VerifyReport:
    chosen = [x for x in (target, ollama_name, sums) if x is not None]
    if len(chosen) != 1:
        raise UsageError(None, "give exactly one of TARGET, --ollama NAME or --sums FILE")
    if ollama_name is not None:
        target = OLLAMA_PREFIX + ollama_name
    if sums is not None:
        if manifest_file is not None:
            raise UsageError(None, "--sums and --manifest do not combine")
        return verify_sums(sums, fail_fast=fail_fast)
    assert target is not None
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
    where = [f"file {escape(m.path)}"]
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
    lines = [f"verify {report.kind}: {escape(report.source)}"]
    for item in report.checked:
        if item.ok:
            lines.append(f"ok {item.algorithm} {item.digest}: file {escape(item.path)}, {item.size} bytes "
                         f"({escape(item.subject)})")
    for m in report.mismatches:
        lines.extend(describe_mismatch(m))
    stop = " (stopped at the first mismatch)" if report.stopped_early else ""
    lines.append(f"summary: {report.stats.files} files hashed, {report.stats.bytes_hashed} bytes, "
                 f"{len(report.mismatches)} mismatches{stop}")
    return lines
