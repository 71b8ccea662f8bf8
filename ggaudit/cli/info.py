"""``ggaudit info``: the model's header, metadata and tensor table."""

from __future__ import annotations

import click

from ..outcomes import run_models
from ..model_info import ModelInfo
from ..format.layout import open_model
from ..stores.locate import resolve_model
from .common import STORE_HELP, PathParam, expand_models, handle_errors, model_inputs
from .reporters import Rendering, check_report_file, emit_outcomes, format_options


@click.command()
@click.argument("models", metavar="MODEL...", nargs=-1, required=True)
@click.option("--store", type=PathParam(file_okay=False), help=STORE_HELP)
@format_options
@handle_errors
def info(models: tuple[str, ...], store: str | None, rendering: Rendering) -> None:
    """Show each MODEL's header, metadata and tensor table.

    MODEL is a GGUF file, any shard of a split set, or ollama:NAME (its model blob, then its
    projector's if it has one).
    """
    inputs = [path for m in models for path in model_inputs(m, store)] if rendering.to_file else []
    check_report_file(rendering, inputs)        # -o FILE is no MODEL's file: refused before any is read
    # A name expand_models could not resolve is resolved again here, so its error becomes its outcome.
    outcomes = run_models(expand_models(models, store),
                          lambda m: ModelInfo(model=open_model(resolve_model(m, store=store)[0])))
    raise SystemExit(emit_outcomes(outcomes, rendering, inputs=inputs))
