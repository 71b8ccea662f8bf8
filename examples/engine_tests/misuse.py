"""Misuses of ggaudit's library that a type checker catches before any test runs: each marked line is one,
and ``mypy --strict --warn-unused-ignores`` (scripts/typing_lane.sh) fails when a marked line stops being an
error, as it would if ggaudit's types were lost (an install mypy cannot see, an option typed ``Any``).
Never run: every line here is wrong on purpose."""

from __future__ import annotations

from typing import TYPE_CHECKING

import ggaudit

if TYPE_CHECKING:
    from typing_extensions import assert_type


def reader_of(path: str) -> ggaudit.Reader:
    """A reader factory missing its second parameter, the read path's name (a ReaderFactory takes both)."""
    return ggaudit.Reader(path, 0)


def misuses(model: ggaudit.Model, finding: ggaudit.Finding, template: ggaudit.TemplateFinding) -> None:
    # An option misspelled, and an option's value of the wrong type.
    ggaudit.scan(model, deeep=True)  # type: ignore[call-arg]
    ggaudit.scan(model, limit="5")  # type: ignore[arg-type]
    ggaudit.verify(model, manifest=3)  # type: ignore[arg-type]
    # A read path that does not exist (a Mode is "buffered", "mmap" or "direct").
    ggaudit.check_rows(model, [4162], modes=("bufferd",))  # type: ignore[arg-type]
    # A word no verdict, finding kind or template rule is: the comparison could never be true.
    assert ggaudit.check(model).verdict != "clean"  # type: ignore[comparison-overlap]
    assert finding.kind != "NaN"  # type: ignore[comparison-overlap]
    assert template.rule != "forbidden_name"  # type: ignore[comparison-overlap]
    # A reader factory of the wrong shape.
    ggaudit.RowsOptions(reader_factory=reader_of)  # type: ignore[arg-type]
    # A job's modules reached through its function: they are imported by name (from ggaudit.scan.run import ...).
    assert ggaudit.scan.run  # type: ignore[attr-defined]


def what_mypy_sees(model: ggaudit.Model) -> None:
    """The types an engine's code gets from each job: were one of them ``Any`` (or another type), its line fails."""
    assert_type(ggaudit.scan(model), ggaudit.ScanReport)
    assert_type(ggaudit.check_rows(model, [4162]), ggaudit.RowsReport)
    assert_type(ggaudit.verify(model, manifest="model.manifest.json"), ggaudit.VerifyReport)
    assert_type(ggaudit.open_model("model.gguf"), ggaudit.Model)
