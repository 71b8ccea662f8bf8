"""``ggaudit diff``: compare two models tensor by tensor and file by file; exit 0 same, 1 different, 2 unreadable."""

from __future__ import annotations

import click

from typing import TYPE_CHECKING

from ..outcomes import run_models
from .common import STORE_HELP, PathParam, handle_errors, model_inputs
from .progress import run_progress
from .reporters import Rendering, check_report_file, emit_outcomes, format_options

if TYPE_CHECKING:
    from ..verify.diff import DiffReport


@click.command()
@click.argument("a")
@click.argument("b")
@click.option("--store", type=PathParam(file_okay=False), help=STORE_HELP)
@format_options
@click.option("--fail-fast", is_flag=True, help="Stop at the first tensor whose data differ.")
@handle_errors
def diff(a: str, b: str, store: str | None, rendering: Rendering, fail_fast: bool) -> None:
    """Compare models A and B (files, split sets, or ollama:NAME): metadata keys only in one or with
    another type or value (for arrays, the first differing element), tensors only in one, type or shape
    changes, and for differing data the first differing byte and the number of differing rows. Then,
    file by file, the bytes no tensor owns (padding, gaps, data after the last tensor), the alignment,
    the data offset and the size."""
    # Imported here, not above: `ggaudit diff --help` loads neither numpy nor the comparison.
    from ..stores.locate import resolve_model
    from ..verify.diff import DiffOptions, diff_paths

    inputs = model_inputs(a, store) + model_inputs(b, store) if rendering.to_file else []
    check_report_file(rendering, inputs)        # -o FILE is neither model: refused before either is read
    options = DiffOptions(fail_fast=fail_fast)
    # One target, A (compared with B): a failure is its outcome, which names the file that failed.
    with run_progress("diff", [a], rendering) as bar:

        def compare(_: str) -> DiffReport:
            with bar.item() as progress:
                return diff_paths(resolve_model(a, store=store)[0], resolve_model(b, store=store)[0],
                                  options=options, progress=progress)

        outcomes = run_models([a], compare)
    raise SystemExit(emit_outcomes(outcomes, rendering, inputs=inputs))
