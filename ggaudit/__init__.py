"""ggaudit: is this model file's data intact, and does every way of reading it deliver the same bytes?

The front door of the library::

    import ggaudit
    model = ggaudit.open_model("model.gguf")       # or "ollama:NAME", "hf:ORG/NAME", a split set's shard
    report = ggaudit.scan(model)                   # NaN/Inf at the level of the stored bits
    rows = ggaudit.check_rows(model, rows=[4162, 4170], modes=("buffered", "mmap", "direct"))
    checked = ggaudit.verify(model, manifest="model.manifest.json")
    whole = ggaudit.check("ollama:NAME")           # every byte through every read path, and the verdict
    print(report.ok, rows.ok, checked.ok, whole.verdict, report.to_json())

Every entry point takes a path, ``ollama:NAME``, ``hf:ORG/NAME`` or an opened :class:`Model`; options
are keyword-only, or one frozen options object (``scan(model, options=ScanOptions(deep=True))``;
:class:`VerifyOptions`, :class:`DiffOptions`, :class:`RowsOptions`, :class:`CheckOptions`); every report
is a frozen dataclass with ``.ok`` and ``.to_json()``; bad input raises a :class:`GGAuditError` subclass.
Nothing here prints, exits or writes to an audited file.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__
from .errors import FormatError, GGAuditError, ManifestError, ReadError, UsageError

if TYPE_CHECKING:       # what the names below are, for type checkers; at run time they load on first use
    from .check.options import CheckOptions
    from .check.report import CheckReport
    from .check.run import check
    from .format.layout import Model
    from .stores.locate import open_model
    from .rows.replay import RowSelection, RowsOptions, RowsReport, check_rows
    from .scan.options import ScanOptions
    from .scan.report import Finding, ScanReport
    from .scan.run import scan
    from .verify.diff import DiffOptions, DiffReport
    from .verify.diff import diff_paths as diff
    from .verify.dispatch import verify
    from .verify.manifests.tensor import TensorManifest
    from .verify.manifests.tensor import build_tensor_manifest as build_manifest
    from .verify.manifests.tensor import write_tensor_manifest as write_manifest
    from .verify.options import VerifyOptions
    from .verify.report import VerifyReport

#: Name -> "module:attribute" it is loaded from. ``scan``, ``verify`` and ``check`` are their (callable) packages.
_LAZY = {
    "CheckOptions": "ggaudit.check.options:CheckOptions",
    "CheckReport": "ggaudit.check.report:CheckReport",
    "Model": "ggaudit.format.layout:Model",
    "open_model": "ggaudit.stores.locate:open_model",
    "RowSelection": "ggaudit.rows.replay:RowSelection",
    "RowsOptions": "ggaudit.rows.replay:RowsOptions",
    "RowsReport": "ggaudit.rows.replay:RowsReport",
    "check_rows": "ggaudit.rows.replay:check_rows",
    "Finding": "ggaudit.scan.report:Finding",
    "ScanOptions": "ggaudit.scan.options:ScanOptions",
    "ScanReport": "ggaudit.scan.report:ScanReport",
    "DiffOptions": "ggaudit.verify.diff:DiffOptions",
    "DiffReport": "ggaudit.verify.diff:DiffReport",
    "diff": "ggaudit.verify.diff:diff_paths",
    "TensorManifest": "ggaudit.verify.manifests.tensor:TensorManifest",
    "build_manifest": "ggaudit.verify.manifests.tensor:build_tensor_manifest",
    "write_manifest": "ggaudit.verify.manifests.tensor:write_tensor_manifest",
    "VerifyOptions": "ggaudit.verify.options:VerifyOptions",
    "VerifyReport": "ggaudit.verify.report:VerifyReport",
    "scan": "ggaudit.scan",
    "verify": "ggaudit.verify",
    "check": "ggaudit.check",
}

__all__ = [
    "CheckOptions", "CheckReport", "DiffOptions", "DiffReport", "Finding", "FormatError", "GGAuditError",
    "ManifestError", "Model", "ReadError", "RowSelection", "RowsOptions", "RowsReport", "ScanOptions", "ScanReport",
    "TensorManifest", "UsageError",
    "VerifyOptions", "VerifyReport", "__version__",
    "build_manifest", "check", "check_rows", "diff", "open_model", "scan", "verify", "write_manifest",
]


def __getattr__(name: str) -> Any:
    """Load a name of the front door on first use: ``import ggaudit`` stays as cheap as its version."""
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'ggaudit' has no attribute {name!r}")
    module, _, attribute = where.partition(":")
    value = importlib.import_module(module)
    if attribute:
        value = getattr(value, attribute)
        globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
