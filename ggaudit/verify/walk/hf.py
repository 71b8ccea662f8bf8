"""A Hugging Face cache snapshot by name, for callers that name it: the store's own listing through the one
walker (:mod:`.listing`)."""

from __future__ import annotations

import os

from ...io.fan_out import Progress
from ...stores.hf import HFStore
from ...stores.registry import Roots
from ..cache import DigestCache
from ..report import VerifyReport
from .listing import verify_listing


def verify_hf(spec: str, cache: str | os.PathLike[str] | None = None, *,
              fail_fast: bool = False, progress: Progress | None = None,
              digest_cache: DigestCache | None = None) -> VerifyReport:
    """Check every file of a cached Hugging Face snapshot against its blob's name, offline."""
    listing = HFStore(spec, Roots(hf_cache=cache)).listing()
    return verify_listing(listing, fail_fast=fail_fast, progress=progress, digest_cache=digest_cache)
