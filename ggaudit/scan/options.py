"""What a scan is asked to do: one frozen object, made once and given to every scan (local or on a fleet).

Each option is checked as the object is made, so a bad value fails before any model is opened, and an
options object that exists is one a scan can take. What needs the model (a pattern that matches no
tensor, an FP8 name that is no I8 tensor) is checked when the scan is planned (:func:`ggaudit.scan.run.plan_scan`).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Collection
from dataclasses import dataclass

from ..errors import UsageError, check_arg, check_count, one_or_many
from ..io.hashing import ALGORITHMS
from .kernel import Options

__all__ = ["ScanOptions"]


@dataclass(frozen=True, kw_only=True)
class ScanOptions:
    """How :func:`ggaudit.scan` scans (its keyword arguments are these fields).

    *tensors*: glob patterns selecting tensors by name (each must match one; a str is one pattern; None:
    all). *deep*: also decode block-quantized tensors with gguf.quants and check the decoded values, and
    look a BPE vocabulary's merges up in its tokens.
    *max_abs*: report finite values or scales with ``|x| > max_abs`` as outliers. *as_fp8*: names of I8
    tensors holding FP8 E4M3 bytes (a str is one name). *limit*: findings listed per tensor (all are
    counted). *fail_fast*: stop at the first finding. *workers*: reader processes (0 reads in this
    process; None picks). *hashes*: digest algorithms of each whole file, from the scan's one read (a str
    is one name). *histograms*: count each tensor's float fields per power of two. *anomalies*: model
    each quantized tensor's block scales and report the blocks far outside what they predict.

    Collections are kept as tuples, so two options objects asking the same are equal.
    """

    tensors: Collection[str] | None = None
    deep: bool = False
    max_abs: float | None = None
    as_fp8: Collection[str] = ()
    limit: int = 16
    fail_fast: bool = False
    workers: int | None = None
    hashes: Collection[str] = ()
    histograms: bool = False
    anomalies: bool = False

    def __post_init__(self) -> None:
        # Frozen: the collections are kept as tuples the way the dataclass's own __init__ sets fields.
        if self.tensors is not None:
            object.__setattr__(self, "tensors", one_or_many("tensors", self.tensors))
        for name in ("as_fp8", "hashes"):
            object.__setattr__(self, name, one_or_many(name, getattr(self, name)))
        for name in ("deep", "fail_fast", "histograms", "anomalies"):
            check_arg(name, getattr(self, name), bool, "True or False")
        if self.max_abs is not None:
            check_arg("max_abs", self.max_abs, numbers.Real, "a number or None")
            if not (math.isfinite(self.max_abs) and self.max_abs >= 0):
                raise UsageError(None, f"must be a finite number >= 0, not {self.max_abs!r}", field="max_abs")
            object.__setattr__(self, "max_abs", float(self.max_abs))
        check_count("limit", self.limit)
        if self.workers is not None:
            check_count("workers", self.workers)
        self._check_hashes()

    def _check_hashes(self) -> None:
        unknown = [name for name in self.hashes if name not in ALGORITHMS]
        if unknown:
            raise UsageError(None, f"unknown digest algorithm {unknown[0]!r} (known: {', '.join(ALGORITHMS)})",
                             field="hashes")
        if self.hashes and self.workers:
            # The digests need every byte in order, in this process: the mapped workers never copy them.
            raise UsageError(None, "hashes are computed by the one streamed read: workers must be 0 or None",
                             field="workers")

    @property
    def kernel(self) -> Options:
        """What the bit tests need of these options (:class:`ggaudit.scan.kernel.Options`)."""
        return Options(self.max_abs, self.limit, self.fail_fast, self.histograms, self.anomalies)
