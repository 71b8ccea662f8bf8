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
are typed keyword-only parameters, or one frozen options object (``scan(model, options=ScanOptions(deep=True))``;
:class:`VerifyOptions`, :class:`DiffOptions`, :class:`RowsOptions`, :class:`CheckOptions`); every report
is a frozen dataclass with ``.ok`` and ``.to_json()``; bad input raises a :class:`GGAuditError` subclass.
Nothing here prints, exits or writes to an audited file.

``ggaudit.scan``, ``ggaudit.verify`` and ``ggaudit.check`` are the functions, whatever was imported: the
modules of those jobs are imported by name (``from ggaudit.scan import workers``, ``from ggaudit.scan.report
import TensorScan``), not reached through the function: ``ggaudit.scan.workers`` is no attribute of it, for a
type checker as at run time, and so ``import ggaudit.scan.workers as workers`` fails where a type checker lets
it pass (Python looks the alias up through ``ggaudit.scan``).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

from ._version import __version__
from .errors import FormatError, GGAuditError, ManifestError, NothingChecked, ReadError, UsageError

if TYPE_CHECKING:       # what the names below are, for type checkers; at run time they load on first use
    from .check.facts import Verdict
    from .check.options import CheckOptions
    from .check.report import CheckReport, FileCheck
    from .check.run import check
    from .diagnostic import Diagnostic
    from .evidence.paths import Mode
    from .evidence.readers import Reader
    from .format.blocks import GGMLQuantizationType
    from .format.build import TensorSpec, write_gguf
    from .format.layout import GGUFFile, MetaValue, Model, Tensor
    from .format.metadata_finding import MetadataFinding
    from .format.structure import StructureFinding
    from .format.templates.finding import TemplateFinding
    from .format.templates.rules import TemplateRule
    from .rows.classify import RowMismatch
    from .rows.gather import RowCache
    from .rows.options import CacheFactory, ReaderFactory, RowsOptions
    from .rows.replay import check_rows
    from .rows.report import RowsReport
    from .rows.select import GivenIds, RowSelection
    from .scan.options import ScanOptions
    from .scan.report import Finding, FindingKind, HeaderChecks, ScanReport, TensorScan
    from .scan.run import scan
    from .stores.locate import open_model
    from .verify.diff import DiffOptions, DiffReport
    from .verify.diff import diff_paths as diff
    from .verify.dispatch import verify
    from .verify.manifests.tensor import TensorManifest
    from .verify.manifests.tensor import build_tensor_manifest as build_manifest
    from .verify.manifests.tensor import write_tensor_manifest as write_manifest
    from .verify.options import VerifyOptions
    from .verify.report import Checked, Mismatch, VerifyReport

#: Name -> "module:attribute" it is loaded from (the same as the imports above: tests/test_api.py).
_LAZY = {
    # the entry points
    "open_model": "ggaudit.stores.locate:open_model",
    "scan": "ggaudit.scan.run:scan",
    "verify": "ggaudit.verify.dispatch:verify",
    "check": "ggaudit.check.run:check",
    "check_rows": "ggaudit.rows.replay:check_rows",
    "diff": "ggaudit.verify.diff:diff_paths",
    "build_manifest": "ggaudit.verify.manifests.tensor:build_tensor_manifest",
    "write_manifest": "ggaudit.verify.manifests.tensor:write_tensor_manifest",
    # their options
    "ScanOptions": "ggaudit.scan.options:ScanOptions",
    "VerifyOptions": "ggaudit.verify.options:VerifyOptions",
    "CheckOptions": "ggaudit.check.options:CheckOptions",
    "DiffOptions": "ggaudit.verify.diff:DiffOptions",
    "RowsOptions": "ggaudit.rows.options:RowsOptions",
    "RowSelection": "ggaudit.rows.select:RowSelection",
    "Mode": "ggaudit.evidence.paths:Mode",
    # what they return, and the findings in it
    "ScanReport": "ggaudit.scan.report:ScanReport",
    "TensorScan": "ggaudit.scan.report:TensorScan",
    "Finding": "ggaudit.scan.report:Finding",
    "FindingKind": "ggaudit.scan.report:FindingKind",
    "HeaderChecks": "ggaudit.scan.report:HeaderChecks",
    "StructureFinding": "ggaudit.format.structure:StructureFinding",
    "MetadataFinding": "ggaudit.format.metadata_finding:MetadataFinding",
    "TemplateFinding": "ggaudit.format.templates.finding:TemplateFinding",
    "TemplateRule": "ggaudit.format.templates.rules:TemplateRule",
    "VerifyReport": "ggaudit.verify.report:VerifyReport",
    "Mismatch": "ggaudit.verify.report:Mismatch",
    "Checked": "ggaudit.verify.report:Checked",
    "RowsReport": "ggaudit.rows.report:RowsReport",
    "RowMismatch": "ggaudit.rows.classify:RowMismatch",
    "GivenIds": "ggaudit.rows.select:GivenIds",
    "CheckReport": "ggaudit.check.report:CheckReport",
    "FileCheck": "ggaudit.check.report:FileCheck",
    "Verdict": "ggaudit.check.facts:Verdict",
    "DiffReport": "ggaudit.verify.diff:DiffReport",
    "TensorManifest": "ggaudit.verify.manifests.tensor:TensorManifest",
    "Diagnostic": "ggaudit.diagnostic:Diagnostic",
    # a model as opened
    "Model": "ggaudit.format.layout:Model",
    "GGUFFile": "ggaudit.format.layout:GGUFFile",
    "Tensor": "ggaudit.format.layout:Tensor",
    "MetaValue": "ggaudit.format.layout:MetaValue",
    # an engine's own reads under check_rows (RowsOptions' factories)
    "Reader": "ggaudit.evidence.readers:Reader",
    "ReaderFactory": "ggaudit.rows.options:ReaderFactory",
    "RowCache": "ggaudit.rows.gather:RowCache",
    "CacheFactory": "ggaudit.rows.options:CacheFactory",
    # small GGUF files for an engine's tests
    "GGMLQuantizationType": "ggaudit.format.blocks:GGMLQuantizationType",
    "TensorSpec": "ggaudit.format.build:TensorSpec",
    "write_gguf": "ggaudit.format.build:write_gguf",
}

__all__ = [
    "CacheFactory", "CheckOptions", "CheckReport", "Checked", "Diagnostic", "DiffOptions", "DiffReport", "FileCheck",
    "Finding", "FindingKind", "FormatError", "GGAuditError", "GGMLQuantizationType", "GGUFFile", "GivenIds",
    "HeaderChecks", "ManifestError",
    "MetaValue", "MetadataFinding", "Mismatch", "Mode", "Model", "NothingChecked", "ReadError", "Reader",
    "ReaderFactory", "RowCache", "RowMismatch", "RowSelection", "RowsOptions", "RowsReport", "ScanOptions",
    "ScanReport", "StructureFinding", "TemplateFinding", "TemplateRule", "Tensor", "TensorManifest", "TensorScan",
    "TensorSpec", "UsageError", "Verdict", "VerifyOptions", "VerifyReport", "__version__", "build_manifest", "check",
    "check_rows", "diff", "open_model", "scan", "verify", "write_gguf", "write_manifest",
]

#: The functions named as the package of their job: the import system binds a package to its name in the
#: parent as it imports it (``import ggaudit.scan.kernel`` would make ``ggaudit.scan`` the package), and
#: these names are the functions.
_FUNCTIONS_NAMED_AS_PACKAGES = frozenset({"scan", "verify", "check"})


class _FrontDoor(types.ModuleType):
    """The ``ggaudit`` module, which keeps ``scan``, ``verify`` and ``check`` the functions."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _FUNCTIONS_NAMED_AS_PACKAGES and isinstance(value, types.ModuleType):
            return      # the job's package, bound by the import system: it stays in sys.modules only
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _FrontDoor


def __getattr__(name: str) -> Any:
    """Load a name of the front door on first use: ``import ggaudit`` stays as cheap as its version."""
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'ggaudit' has no attribute {name!r}")
    module, _, attribute = where.partition(":")
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
