"""Packages that are also their own main function: ``ggaudit.scan`` is the folder of the scan's modules and
``ggaudit.scan(model)`` runs a scan; the same for ``ggaudit.verify``.

Python binds a package to its name in the parent the moment the package is first imported, so a function
of the same name in ``ggaudit/__init__.py`` would be replaced by the package as soon as anything imports
``ggaudit.scan.kernel``, or never be there if the front door is loaded lazily. Making the package
callable gives ``ggaudit.scan`` one meaning whatever was imported first, and keeps ``import ggaudit``
free of numpy until a job runs.

The plainer layouts were weighed and each loses something: binding the functions eagerly in the front door
(after their packages, so the binding wins) loads numpy on ``import ggaudit`` and breaks dotted access
``ggaudit.scan.run.scan``; renaming the folders (``ggaudit/scanning/``) breaks ``import ggaudit.scan.run``
and the house's folder-per-command table. Assigning a module's ``__class__`` to a ModuleType subclass is
supported by Python for this (3.5+). Probes in tests/test_api.py (callable whatever was imported first).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any


class CallablePackage(types.ModuleType):
    """A package module whose call runs the function named by ``_entry`` ("module:attribute")."""

    _entry: str

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.entry()(*args, **kwargs)

    def entry(self) -> Any:
        """The function the package stands for (imported on first use)."""
        module, _, attribute = self._entry.partition(":")
        return getattr(importlib.import_module(module), attribute)


def make_callable(package: str, entry: str) -> None:
    """Turn the package module ``package`` (while it is being imported) into a CallablePackage."""
    module = sys.modules[package]
    module.__class__ = CallablePackage
    module._entry = entry  # type: ignore[attr-defined]
