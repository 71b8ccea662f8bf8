"""How the CLI shows a run: reporters, chosen by name (``--format NAME``; ``--json`` is ``--format json``).

A reporter is a function ``report(outcomes) -> str``: it takes the outcome of every target of the run, in
the order given (a report, or the error that stopped it), and returns the text for stdout. Adding a
format is one file: a module in this package named as its format, defining ``NAME`` (that name) and
``report``; it is found here and offered by every command, and imported only when a run prints with it.
Errors are never a reporter's job alone: each is also one line on stderr.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import pkgutil
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

import click

from ...batch import Outcome, Report, overall_status
from ..common import as_flags

Reporter = Callable[[Sequence[Outcome[Report]]], str]


#: The format names: this package's modules, listed without importing them (the text reporter imports
#: every report type, numpy with them, and `--help` should not).
NAMES: tuple[str, ...] = tuple(sorted(m.name for m in pkgutil.iter_modules(__path__)))


def reporter(name: str) -> Reporter:
    """The reporter of the format ``name`` (one of :data:`NAMES`), imported on first use."""
    module = importlib.import_module(f"{__name__}.{name}")
    found: Reporter = module.report
    return found


def emit_outcomes(outcomes: Sequence[Outcome[Report]], fmt: str) -> int:
    """Print the run with the reporter ``fmt``, each target's error as one line on stderr, and return the
    exit status: 2 if any target failed, else 1 if any report is not ok, else 0."""
    # Errors name the command line's options, not the library's parameters, on stderr and in reports.
    said = [o if o.error is None else dataclasses.replace(o, error=as_flags(o.error)) for o in outcomes]
    text = reporter(fmt)(said)
    if text:
        click.echo(text, nl=False)
    for o in said:
        if o.error is not None:
            click.echo(f"ggaudit: error: {o.error}", err=True)
    return overall_status(said)


F = TypeVar("F", bound=Callable[..., Any])


def format_options(command: F) -> F:
    """``--format NAME`` (any reporter here; default text) and ``--json``, short for ``--format json``: the
    command receives the name as ``fmt``. Two options, not one destination, since click versions differ
    in which of two options sharing a destination sets it."""
    return format_options_also()(command)


def format_options_also(*extra: str) -> Callable[[F], F]:
    """:func:`format_options` whose ``--format`` also accepts the command's own ``extra`` names (the
    command then decides what they mean)."""

    def decorate(command: F) -> F:
        @functools.wraps(command)
        def with_format(*args: Any, fmt: str, as_json: bool, **kwargs: Any) -> Any:
            return command(*args, fmt="json" if as_json else fmt, **kwargs)

        with_json = click.option("--json", "as_json", is_flag=True, help="Print the result as JSON (--format json).")
        with_name = click.option("--format", "fmt", type=click.Choice(list(NAMES) + list(extra)),
                                 default="text", show_default=True, help="How to print the result.")
        return cast(F, with_name(with_json(with_format)))

    return decorate
