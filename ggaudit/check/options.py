"""What a check is asked to do: one frozen object, made once, checked as it is made."""

from __future__ import annotations

import os
import re
from collections.abc import Collection
from dataclasses import dataclass

from ..errors import UsageError, check_arg, one_or_many
from ..evidence.paths import MODES, Mode
from ..untrusted import quote

__all__ = ["MODES", "CheckOptions"]

_HEX64 = re.compile(r"[0-9a-fA-F]{64}")


@dataclass(frozen=True, kw_only=True)
class CheckOptions:
    """How :func:`ggaudit.check` checks (its keyword arguments are these fields).

    *manifest*: ggaudit's tensor manifest of the model (made with ``ggaudit manifest`` where the model is
    known good): its digests localise a difference to tensors and row ranges. *sums*: a sha256 checksum
    file naming the target's file(s). *sha256*: the sha256 the target's one file should have. *store*,
    *hf_cache*: the roots of the stores names are found in (default per OS). *modes*: the read paths
    compared (a str is one; at least one of ``buffered``, ``mmap``, ``direct``). *anomalies*: also
    report block scales far outside what their tensor predicts (as ``scan --anomalies``). *evict*: where
    the page cache held what was published and direct reads deliver other bytes (or nothing is published and
    they disagree), evict the page where they first differ and read it again through the page cache, now from
    the device, to tell a device holding other bytes from direct reads that are wrong (False: undecided, both
    explanations said).
    """

    manifest: str | os.PathLike[str] | None = None
    sums: str | os.PathLike[str] | None = None
    sha256: str | None = None
    store: str | os.PathLike[str] | None = None
    hf_cache: str | os.PathLike[str] | None = None
    modes: Mode | Collection[Mode] = MODES
    anomalies: bool = False
    evict: bool = True

    def __post_init__(self) -> None:
        for name in ("manifest", "sums", "store", "hf_cache"):
            check_arg(name, getattr(self, name), (str, os.PathLike, type(None)), "a path or None")
        check_arg("anomalies", self.anomalies, bool, "True or False")
        check_arg("evict", self.evict, bool, "True or False")
        check_arg("sha256", self.sha256, (str, type(None)), "a string or None")
        if self.sha256 is not None:
            if not _HEX64.fullmatch(self.sha256):
                raise UsageError(None, f"{quote(self.sha256)} is not a sha256: 64 hex digits", field="sha256")
            object.__setattr__(self, "sha256", self.sha256.lower())
        if self.sha256 is not None and self.sums is not None:
            raise UsageError(None, "is one file's digest: not with a checksum file (sums)", field="sha256")
        modes = one_or_many("modes", self.modes)
        unknown = [m for m in modes if m not in MODES]
        if unknown or not modes:
            raise UsageError(None, f"{quote(unknown[0]) if unknown else 'none given'}: choose from "
                                   f"{', '.join(MODES)}", field="modes")
        # In the house order whatever order they were given in: buffered first, the reference read.
        object.__setattr__(self, "modes", tuple(m for m in MODES if m in modes))
