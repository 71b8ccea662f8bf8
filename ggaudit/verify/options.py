"""What a verify is asked to do: one frozen object, made once and given to every verify (local or on a fleet).

Each option is checked as the object is made; what depends on the target (a manifest for an opened model,
a checksum file beside a target) is checked by :func:`ggaudit.verify` when it picks the check.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import UsageError, check_arg
from .cache import CacheChoice, check_cache_use

__all__ = ["VerifyOptions"]

_PATHS = ("manifest", "sums", "store", "hf_cache", "base")


@dataclass(frozen=True, kw_only=True)
class VerifyOptions:
    """How :func:`ggaudit.verify` checks (its keyword arguments are these fields; see it for each one).

    *manifest*: check a model against this manifest. *sums*: check the files a sha256 checksum file names
    (*base*: the folder names resolve in; *ignore_missing*: skip absent files). *store*, *hf_cache*: the
    roots of the stores names are found in (default per OS). *sha256*: check one file against this digest.
    *fail_fast*: stop at the first mismatch. *cache*, *trust_cache*, *quick*: how the digest cache is used.
    """

    manifest: str | os.PathLike[str] | None = None
    sums: str | os.PathLike[str] | None = None
    store: str | os.PathLike[str] | None = None
    hf_cache: str | os.PathLike[str] | None = None
    fail_fast: bool = False
    sha256: str | None = None
    ignore_missing: bool = False
    base: str | os.PathLike[str] | None = None
    cache: CacheChoice = False
    trust_cache: bool = False
    quick: bool = False

    def __post_init__(self) -> None:
        for name in _PATHS:
            check_arg(name, getattr(self, name), (str, os.PathLike, type(None)), "a path or None")
        check_arg("sha256", self.sha256, (str, type(None)), "a string or None")
        for name in ("fail_fast", "ignore_missing"):
            check_arg(name, getattr(self, name), bool, "True or False")
        if self.quick and self.manifest is not None:
            raise UsageError(None, "checks whole files' cached digests; a manifest's check reads every tensor",
                             field="quick")
        check_cache_use(self.cache, trust=self.trust_cache, quick=self.quick)
