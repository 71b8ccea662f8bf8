"""The conclusions of a check's decision in words, each sentence no stronger than its evidence: "the file on
disk is intact" only where a read from the device gave what was published (or the manifest), "every read
path delivered the same other bytes" only where they did."""

from __future__ import annotations

from collections.abc import Sequence

from ..wording import joined
from ..verify.report import Mismatch
from ..verify.walk.tensors import compare_tensors
from .facts import PUBLISHED, Conclusion, Eviction, Expectation, ManifestLines, Observed
from .hashlines import matches_lines, tensor_json

__all__ = ["agree", "device_differs", "device_not_read", "differs", "eviction_words", "expectations_conflict",
           "manifest_disagrees", "matches_reference", "no_reference", "not_compared", "read_path_differs"]

#: The runs of differing row groups a read-path-differs conclusion lists (first offset first).
MAX_RUNS = 16


def agree(observed: Sequence[Observed]) -> Conclusion | None:
    """``read-paths-agree`` when two or more paths ran and all delivered the same bytes, else None."""
    if len(observed) < 2 or len({o.fingerprint for o in observed}) != 1:
        return None
    modes = [o.mode for o in observed]
    independent = any(o.from_device for o in observed) and any(not o.from_device for o in observed)
    shared = next((o.source_why for o in observed if o.source_why), None)
    why = ("the page cache and the device agree" if independent else
           f"direct reads here come from the page cache too ({shared}), so this says nothing of a device"
           if shared else "both come from the page cache, so this says nothing of the disk")
    return Conclusion(code="read-paths-agree", text=f"{joined(modes)} reads delivered the same bytes ({why})",
                      evidence={"paths": modes, "independent": independent})


def matches_reference(ref: Expectation | ManifestLines, paths: Sequence[str]) -> Conclusion:
    if isinstance(ref, ManifestLines):
        return matches_lines(ref, paths)
    code = "matches-published" if ref.source == PUBLISHED else "matches-manifest"
    note = f" ({ref.note})" if ref.note else ""
    return Conclusion(code=code, text=f"the bytes read through {joined(paths)} match {ref.what}{note} "
                                      f"({ref.algorithm} {ref.digest})",
                      evidence={"algorithm": ref.algorithm, "digest": ref.digest, "source": ref.what,
                                "paths": list(paths), "note": ref.note})


def differs(ref: Expectation, disk: Observed, paths: Sequence[str], differences: Sequence[Mismatch], *,
            subject: str, every: str) -> Conclusion:
    """``differs-from-published`` (or ``-manifest``): ``disk`` the read the differences were taken from,
    ``subject`` what it shows, ``every`` what the paths' agreement says."""
    code = "differs-from-published" if ref.source == PUBLISHED else "differs-from-manifest"
    tensors = [tensor_json(m) for m in differences if m.tensor is not None]
    where = ""
    if tensors:
        shown = [f"{t['tensor']} rows {t['rows'][0]}-{t['rows'][1]}" if t["rows"] else str(t["tensor"])
                 for t in tensors[:5]]
        where = f"; the bytes that differ: {', '.join(shown)}{', ...' if len(tensors) > 5 else ''}"
    note = f" ({ref.note})" if ref.note else ""
    return Conclusion(code=code, text=f"{subject} differs from {ref.what}{note}{every}{where}",
                      evidence={"algorithm": ref.algorithm, "expected": ref.digest,
                                "actual": disk.digests.get(ref.algorithm), "source": ref.what, "paths": list(paths),
                                "read": disk.mode, "tensors": tensors, "note": ref.note})


def read_path_differs(observed: Sequence[Observed], wrong: Sequence[str], right: Sequence[str],
                      reference: str | None, *, decided: bool, text: str) -> Conclusion:
    """``read-path-differs``: the paths in ``wrong`` delivered other bytes than those in ``right``."""
    by_mode = {o.mode: o for o in observed}
    good = by_mode[right[0]]
    differing = [m for w in wrong for m in compare_tensors(good.tensors, by_mode[w].tensors, "")
                 if m.tensor is not None]
    tensors = sorted({m.tensor for m in differing if m.tensor is not None})
    where = f" for tensors {', '.join(tensors[:5])}{', ...' if len(tensors) > 5 else ''}" if tensors else ""
    # Where the bytes differ, first offset first: each tensor's row groups whose digests differ (``rows``: the
    # first and last row of the run), so the verdict can name them and the rows they hold.
    spans = {(m.offset, m.length): m for m in differing if m.offset is not None}     # once for every wrong path
    runs = [tensor_json(spans[span]) for span in sorted(spans)]
    return Conclusion(code="read-path-differs", text=text.format(where=where),
                      evidence={"paths": list(wrong), "agree": list(right), "reference": reference,
                                "decided": decided, "tensors": tensors, "where": runs[:MAX_RUNS]})


def no_reference() -> Conclusion:
    return Conclusion(code="no-published-reference",
                      text="no published reference: the file can only be checked against itself")


def manifest_disagrees(published: Expectation, manifest: Expectation) -> Conclusion:
    return Conclusion(code="manifest-differs-from-published",
                      text=f"the manifest's {manifest.algorithm} of the file is not {published.what}: it was made "
                           "from another file than the published one; the published digest decides",
                      evidence={"algorithm": manifest.algorithm, "manifest": manifest.digest,
                                "published": published.digest})


def expectations_conflict(a: Expectation, b: Expectation) -> Conclusion:
    return Conclusion(code="expectations-conflict",
                      text=f"{a.what} and {b.what} give two {a.algorithm}s of this one file ({a.digest}, {b.digest}): "
                           "at most one of them describes it",
                      evidence={"algorithm": a.algorithm, "sources": [a.what, b.what], "digests": [a.digest, b.digest]})


def device_not_read(observed: Sequence[Observed], skipped: str | None) -> Conclusion:
    """The device was not read past the page cache: nothing said of the file on disk."""
    shared = next((o.source_why for o in observed if o.source_why), None)
    why = (f"direct reads here come from the page cache ({shared})" if shared else
           f"direct reads were skipped ({skipped})" if skipped else "direct reads were not among the paths compared")
    return Conclusion(code="device-not-read",
                      text=f"the device itself was not read past the page cache: {why}; what is said holds for the "
                           "bytes the page cache delivers, not for the file on disk",
                      evidence={"why": why})


def not_compared(modes: Sequence[str], ref: Expectation | ManifestLines, why: str) -> Conclusion:
    what = ref.what
    return Conclusion(code="not-compared",
                      text=f"the bytes {joined(modes)} reads delivered could not be compared with {what}: {why}",
                      evidence={"paths": list(modes), "why": why})


def eviction_words(e: Eviction) -> str:
    """What the eviction test did, in words."""
    if e.outcome is None:
        return f"the eviction test could not be made: {e.why}"
    if e.outcome == "gone":
        return f"nothing was evicted: {e.why}"
    after = {"device": "the device's bytes (as direct reads deliver them)",
             "page-cache": "the page cache's bytes as first read", "neither": "bytes neither read delivered"}
    return (f"the page holding offset {e.offset} was evicted from the page cache and read again through "
            f"{e.cached}, now from the device: it gave {after[e.outcome]} (the 16 bytes from offset {e.offset}: page "
            f"cache {e.cached_hex}; device {e.device_hex}; after the eviction {e.after_hex})")


def device_differs(ref: Expectation | ManifestLines, cached: Sequence[str], e: Eviction) -> Conclusion:
    """The device holds other bytes than ``ref`` describes while the page cache still held them: a lost or
    torn write, or media damage under a cached file."""
    tested = eviction_words(e)
    return Conclusion(code="device-differs",
                      text=f"the file on disk differs from {ref.what}: the device holds other bytes than the page "
                           f"cache, which held the published ones ({joined(cached)} reads matched them); a write "
                           f"that never reached the disk, a torn write or media damage under a cached file. "
                           f"{tested[0].upper()}{tested[1:]}",
                      evidence={"cached": list(cached), "eviction": e.to_json()})

