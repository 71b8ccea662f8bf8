"""Truth by evidence for one file: which read path delivered its right bytes, and what decided it.

Pure: what each path read in (:class:`Observed`), what the active tests found (:class:`Probes`), a
:class:`FileDecision` out; nothing is read here (tests/test_check.py walks every case). Which bytes are right
is decided by :func:`ggaudit.evidence.decide.decide`, the decision ``rows`` makes too: here its groups are the
paths' fingerprints of the whole file, and whether each group is what was published is the digest any of its
paths computed. Every expectation of the file is compared; the first published one a path delivered decides
(else a manifest's, else agreement of independent paths). A group whose digest no path computed (mmap's) and
the page cache against the device are left open with the test that can decide them (:class:`Needs`), which
:mod:`.run` makes before deciding again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ..evidence.decide import Decision, Reading, ReadGroup, decide
from ..evidence.paths import DEVICE
from ..wording import joined
from ..verify.manifests.tensor import TensorDigest
from ..verify.walk.tensors import compare_tensors
from . import words
from .facts import (AGREEMENT, CACHE_VERIFIED, DAMAGED, INTACT, MANIFEST, PUBLISHED, READ_PATH, UNVERIFIED,
                    Conclusion, Eviction, Expectation, FileDecision, LineDigest, ManifestLines, Needs, Observed,
                    Probes, Verdict)
from .hashlines import differs_from_lines, line_differences, lines_disagree

__all__ = ["AGREEMENT", "MANIFEST", "PUBLISHED", "Expectation", "FileDecision", "LineDigest", "ManifestLines",
           "Observed", "Probes", "decide_file"]

#: The names of the reads the eviction test makes among the readings: the page read again through the page
#: cache once evicted, and the device's path read again where the difference did not last (both the device's).
AFTER_EVICTION, DIRECT_AGAIN = "after eviction", "direct again"

Reference = Expectation | ManifestLines


def decide_file(path: str, observed: Sequence[Observed], *,
                published: Expectation | Sequence[Expectation] | None = None, manifest: Expectation | None = None,
                expected_tensors: Sequence[TensorDigest] = (), lines: ManifestLines | None = None,
                tested: Probes | None = None, skipped: str | None = None) -> FileDecision:
    """Decide which of ``observed`` (one per read path, buffered first) delivered the file's right bytes.

    ``published``: every digest its publishers give; ``manifest``: the whole-file digest of a tensor manifest,
    whose ``expected_tensors`` localise a difference; ``lines``: a llama-gguf-hash manifest's lines of the
    file. ``tested``: what the active tests found (a second read hashed, the eviction test); ``skipped``: why
    the device's path did not run, when it did not.
    """
    if not observed:
        raise ValueError("no read path observed the file")
    if lines is not None and not lines.comparable:
        raise ValueError("the manifest's lines of the file give nothing that can be compared")
    pubs = (published,) if isinstance(published, Expectation) else tuple(published or ())
    observed = _alike_share_digests(_rehashed(observed, tested))
    ref = _deciding(pubs, manifest, lines, observed)
    extra = [words.expectations_conflict(a, b) for a, b in _conflicts(pubs)]
    if pubs and manifest and any(p.algorithm == manifest.algorithm and p.digest != manifest.digest for p in pubs):
        extra.append(words.manifest_disagrees(pubs[0], manifest))
    if ref is None:
        # The read after an eviction is no independent witness here: a page-cache read that gives the same
        # bytes from the device as before may be a path that changes every read through the page cache.
        decision = _by_agreement(path, observed, decide(_readings(observed, tested, evicted=False)), tested)
    else:
        readings = _readings(observed, tested)
        d = decide(readings, expected={g.value: _status(ref, _members(g, observed)) for g in _groups(readings)},
                   by=ref.source)
        decision = _by_reference(path, observed, d, ref, expected_tensors, lines, tested, skipped)
        extra += _others(pubs, ref, decision, observed)
        if pubs and lines:
            extra += lines_disagree(pubs[0], lines, next((o for o in observed if o.mode in decision.right), None))
    if any(c.code == "differs-from-published" for c in extra):
        decision = _with(decision, verdict=DAMAGED)
    return _with(decision, more=extra) if extra else decision


def _with(d: FileDecision, *, more: Sequence[Conclusion] = (), verdict: Verdict | None = None) -> FileDecision:
    return replace(d, verdict=verdict or d.verdict, conclusions=(*d.conclusions, *more))


def _rehashed(observed: Sequence[Observed], tested: Probes | None) -> list[Observed]:
    """Each path's observation with the digests of its second read, where that read delivered the same bytes."""
    again = {} if tested is None else tested.rehashed
    out = []
    for o in observed:
        second = again.get(o.mode)
        if isinstance(second, Observed) and second.fingerprint == o.fingerprint:
            o = replace(o, digests={**second.digests, **o.digests})
        out.append(o)
    return out


def _alike_share_digests(observed: Sequence[Observed]) -> list[Observed]:
    """Each path's observation with the digests any path computed of the same bytes (the same xxh3-128 of the
    whole file): the expectations' algorithms ride on one pass, and a path that delivered those bytes has them
    too (the words of a difference quote the digest of the path they name, whichever pass computed it)."""
    by_bytes: dict[str, dict[str, str]] = {}
    for o in observed:
        by_bytes.setdefault(o.fingerprint, {}).update(o.digests)
    return [replace(o, digests={**by_bytes[o.fingerprint], **o.digests}) for o in observed]


def _readings(observed: Sequence[Observed], tested: Probes | None, *, evicted: bool = True) -> list[Reading]:
    """What each path delivered, and the read after an eviction: a read of the device, alike with the path
    whose bytes it gave. (With an expectation it is one: a page-cache read giving the published bytes from the
    device again is no path changing every read; one giving the device's bytes shows the page cache held
    others.)"""
    found = [Reading(o.mode, o.reads, o.fingerprint) for o in observed]
    e = None if tested is None else tested.eviction
    if e is not None and e.outcome == "gone":      # the device's path read again gives the page cache's bytes
        found.append(Reading(DIRECT_AGAIN, DEVICE, next(o for o in observed if o.mode == e.cached).fingerprint))
    elif e is not None and evicted and e.outcome in ("device", "page-cache"):
        alike = next(o for o in observed if o.mode == (e.device if e.outcome == "device" else e.cached))
        found.append(Reading(AFTER_EVICTION, DEVICE, alike.fingerprint))
    return found


def _groups(readings: Sequence[Reading]) -> tuple[ReadGroup, ...]:
    return decide(readings).groups


def _members(g: ReadGroup | None, observed: Sequence[Observed]) -> list[Observed]:
    return [] if g is None else [o for o in observed if o.mode in g.names]


def _status(ref: Reference, members: Sequence[Observed]) -> bool | None:
    """Whether the bytes ``members`` delivered (all alike) are what ``ref`` describes; None: none of them
    computed its digest."""
    if not members:
        return None
    if isinstance(ref, ManifestLines):
        return not line_differences("", ref, members[0])
    computed = [o.digests[ref.algorithm] for o in members if ref.algorithm in o.digests]
    return None if not computed else computed[0] == ref.digest


def _deciding(pubs: Sequence[Expectation], manifest: Expectation | None, lines: ManifestLines | None,
              observed: Sequence[Observed]) -> Reference | None:
    """The expectation that decides: the first published one a path delivered, else the first whose match
    is still open, else the first; without one published, the manifest's."""
    if pubs:
        by_group = {o.fingerprint: [p for p in observed if p.fingerprint == o.fingerprint] for o in observed}
        for wanted in (True, None):
            found = next((p for p in pubs if any(_status(p, m) is wanted for m in by_group.values())), None)
            if found is not None:
                return found
        return pubs[0]
    return manifest or lines


def _conflicts(pubs: Sequence[Expectation]) -> list[tuple[Expectation, Expectation]]:
    return [(a, b) for i, a in enumerate(pubs) for b in pubs[i + 1:]
            if a.algorithm == b.algorithm and a.digest != b.digest]


def _others(pubs: Sequence[Expectation], ref: Reference, decision: FileDecision,
            observed: Sequence[Observed]) -> list[Conclusion]:
    """Every published expectation besides the deciding one, compared with the right bytes: matched, or a
    finding of its own."""
    if decision.verdict == DAMAGED or not decision.right:
        return []
    right = [o for o in observed if o.mode in decision.right]
    found = []
    for p in pubs:
        if isinstance(ref, Expectation) and (p.algorithm, p.digest) == (ref.algorithm, ref.digest):
            continue        # the same digest from another source: matched as the deciding one is
        status = _status(p, right)
        if status is True:
            found.append(words.matches_reference(p, decision.right))
        elif status is False:
            found.append(words.differs(p, right[0], decision.right, (), subject="the bytes the other expectation "
                                       "decided are right", every=""))
    return found


# --- decided by an expectation ------------------------------------------------------------------------

def _by_reference(path: str, observed: Sequence[Observed], d: Decision, ref: Reference,
                  expected_tensors: Sequence[TensorDigest], lines: ManifestLines | None, tested: Probes | None,
                  skipped: str | None) -> FileDecision:
    modes = tuple(o.mode for o in observed)
    if d.unknown:
        return _unknown(path, observed, d, ref, tested)
    if d.met is False:
        return _damaged(path, observed, d, ref, expected_tensors, lines)
    right = tuple(n for n in d.right.names if n in modes) if d.right else ()
    wrong = tuple(m for m in modes if m not in right)
    matched = words.matches_reference(ref, right)
    if not wrong:
        agreed = words.agree(observed)
        if d.right is not None and d.right.from_device:
            return FileDecision(path=path, verdict=INTACT, reference=ref.source, right=right, wrong=(), decided=True,
                                conclusions=tuple(c for c in (matched, agreed) if c), tested=tested)
        return FileDecision(path=path, verdict=CACHE_VERIFIED, reference=ref.source, right=right, wrong=(),
                            decided=True, tested=tested,
                            conclusions=tuple(c for c in (matched, agreed, words.device_not_read(observed, skipped))
                                              if c))
    return _deviating(path, observed, d, ref, right, wrong, matched, tested)


def _deviating(path: str, observed: Sequence[Observed], d: Decision, ref: Reference, right: tuple[str, ...],
               wrong: tuple[str, ...], matched: Conclusion, tested: Probes | None) -> FileDecision:
    """What was published came through ``right``; ``wrong`` delivered other bytes. When no read from the
    device is among ``right`` and the device's path is among ``wrong``, the eviction test tells a wrong
    direct path from a device holding other bytes than the page cache."""
    e = None if tested is None else tested.eviction
    by_device = [o.mode for o in observed if o.mode in wrong and o.from_device]
    if (d.right is not None and d.right.from_device) or not by_device:
        text = _decided_text(observed, wrong, right, confirmed=bool(d.right and d.right.from_device), ref=ref,
                             again=bool(d.right and DIRECT_AGAIN in d.right.names))
        deviation = words.read_path_differs(observed, wrong, right, ref.source, decided=True, text=text)
        return FileDecision(path=path, verdict=READ_PATH, reference=ref.source, right=right, wrong=wrong,
                            decided=True, conclusions=(matched, deviation), tested=tested)
    cached = next(m for m in right if m not in by_device)
    if e is not None and e.outcome == "device":
        return FileDecision(path=path, verdict=DAMAGED, reference=ref.source, right=right, wrong=wrong, decided=True,
                            conclusions=(matched, words.device_differs(ref, right, e)), tested=tested)
    why = words.eviction_words(e) if e is not None else None
    text = (f"{joined(wrong)} reads deliver other bytes than {joined(right)} reads{{where}}, which match "
            f"what was published; no read from the device gave it: either the device holds other bytes than the "
            f"page cache (a write that never reached the disk, a torn write, media damage under a cached file) or "
            f"direct reads are wrong on this machine" + (f"; {why}" if why else ""))
    deviation = words.read_path_differs(observed, wrong, right, ref.source, decided=False, text=text)
    needs = Needs(evict=(cached, by_device[0])) if e is None else Needs()
    return FileDecision(path=path, verdict=READ_PATH, reference=ref.source, right=right, wrong=wrong, decided=False,
                        conclusions=(matched, deviation), needs=needs, tested=tested)


def _decided_text(observed: Sequence[Observed], wrong: Sequence[str], right: Sequence[str], *, confirmed: bool,
                  ref: Reference | None, again: bool = False) -> str:
    """The deviation in words, decided; ``confirmed``: a read from the device is among the right ones (then,
    with an expectation, the file on disk is intact); ``again``: the device's path, read again, delivered the
    right bytes (its first read was wrong once)."""
    if again:
        return (f"{joined(wrong)} reads delivered other bytes once on this machine{{where}}: read again, direct reads "
                f"deliver what {joined(right)} reads did, so the page cache and the device agree on them")
    cached = [o.mode for o in observed if not o.from_device]
    intact = ("; the file on disk is intact" if confirmed and ref is not None else
              "" if ref is not None else f"; {joined(right)} reads agree (the page cache and the device)")
    not_read = "" if confirmed else "; the device itself was not read past the page cache"
    if tuple(wrong) == ("mmap",):
        return f"reading through a memory mapping on this machine delivers other bytes{{where}}{intact}{not_read}"
    if set(wrong) == set(cached) and len(cached) > 1:
        return (f"the page cache holds other bytes than the disk{{where}} (RAM, a filter driver, a VM or storage "
                f"layer): {joined(wrong)} reads agree with each other and differ from direct reads{intact}")
    if tuple(wrong) == ("buffered",) and "mmap" in right:
        return (f"buffered reads deliver other bytes on this machine{{where}}, while mmap reads of the same page "
                f"cache deliver the right ones: something on the way of read calls (a filter driver: antivirus, "
                f"encryption) changes them, not the page cache{intact}{not_read}")
    if tuple(wrong) == ("direct",):
        return ("direct reads deliver wrong bytes on this machine{where}; the page cache and the device (read "
                "again through the page cache once its pages were evicted) hold the file's bytes")
    return f"{joined(wrong)} reads deliver other bytes on this machine{{where}}{intact}{not_read}"


def _unknown(path: str, observed: Sequence[Observed], d: Decision, ref: Reference,
             tested: Probes | None) -> FileDecision:
    """Some group's match with ``ref`` no read computed (a path that computes no digest, mmap, alone): hash a
    second read of it, and decide again; when that was done and gave nothing to go on, say so."""
    again = {} if tested is None else tested.rehashed
    todo = tuple(g.names[0] for g in d.unknown if g.names[0] not in again)
    modes = tuple(o.mode for o in observed)
    if todo:
        return FileDecision(path=path, verdict=READ_PATH, reference=None, right=(), wrong=(), decided=False,
                            conclusions=(), needs=Needs(rehash=todo), tested=tested)
    unknown = [n for g in d.unknown for n in g.names if n in modes]
    why = "; ".join(f"{m}: {again[m]}" for m in unknown if isinstance(again.get(m), str)) or \
        "its second read delivered other bytes than its first"
    found = [words.not_compared(unknown, ref, why)]
    if len(d.groups) > 1:
        known = [m for m in modes if m not in unknown]
        found.append(words.read_path_differs(observed, unknown, known, None, decided=False,
                                             text=f"{joined(unknown)} reads deliver other bytes than "
                                                  f"{joined(known)} reads{{where}}, which do not match {ref.what}"))
    return FileDecision(path=path, verdict=READ_PATH if len(d.groups) > 1 else UNVERIFIED, reference=None, right=(),
                        wrong=tuple(unknown), decided=False, conclusions=tuple(found), tested=tested)


def _damaged(path: str, observed: Sequence[Observed], d: Decision, ref: Reference,
             expected_tensors: Sequence[TensorDigest], lines: ManifestLines | None) -> FileDecision:
    """No path delivered what ``ref`` describes. What the device delivered is what is on disk; without a read
    of it, what the page cache delivers is all that was seen."""
    modes = tuple(o.mode for o in observed)
    device = d.device
    disk = next((o for o in _members(device, observed) if o.from_device), None) or observed[0]
    subject = "the file on disk" if disk.from_device else "the bytes the page cache delivers"
    every = (f": every read path ({joined(modes)}) delivered the same other bytes" if d.agree and len(modes) > 1
             else "")
    differences = tuple(compare_tensors(expected_tensors, disk.tensors, path) if expected_tensors else
                        line_differences(path, lines, disk) if lines is not None else ())
    found = [differs_from_lines(ref, disk, modes, differences, subject, every) if isinstance(ref, ManifestLines)
             else words.differs(ref, disk, modes, differences, subject=subject, every=every)]
    agreed = words.agree(observed)
    if agreed:
        found.append(agreed)
    else:
        others = tuple(m for m in modes if m not in _members_names(device, modes)) if device else modes[1:]
        base = _members_names(device, modes) if device else modes[:1]
        found.append(words.read_path_differs(observed, others, base, None, decided=False,
                                             text=f"{joined(others)} reads deliver other bytes than {joined(base)} "
                                                  "reads{where} (and neither is what was published)"))
    return FileDecision(path=path, verdict=DAMAGED, reference=ref.source, right=(), wrong=modes, decided=True,
                        conclusions=tuple(found), differences=differences)


def _members_names(g: ReadGroup | None, modes: Sequence[str]) -> tuple[str, ...]:
    return () if g is None else tuple(n for n in g.names if n in modes)


# --- decided by agreement, or not at all -----------------------------------------------------------------

def _by_agreement(path: str, observed: Sequence[Observed], d: Decision, tested: Probes | None) -> FileDecision:
    modes = tuple(o.mode for o in observed)
    unref = words.no_reference()
    if d.agree or len(observed) == 1:
        agreed = words.agree(observed)
        return FileDecision(path=path, verdict=UNVERIFIED, reference=None, right=modes, wrong=(), decided=False,
                            conclusions=(unref, agreed) if agreed else (unref,), tested=tested)
    e = None if tested is None else tested.eviction
    if d.right is not None and d.reference == AGREEMENT:
        right = _members_names(d.right, modes)
        wrong = tuple(m for m in modes if m not in right)
        text = _decided_text(observed, wrong, right, confirmed=True, ref=None, again=DIRECT_AGAIN in d.right.names)
        deviation = words.read_path_differs(observed, wrong, right, AGREEMENT, decided=True, text=text)
        return FileDecision(path=path, verdict=READ_PATH, reference=AGREEMENT, right=right, wrong=wrong, decided=True,
                            conclusions=(unref, deviation), tested=tested)
    base = _members_names(d.groups[0], modes)
    wrong = tuple(m for m in modes if m not in base)
    device = [m for m in wrong if next(o for o in observed if o.mode == m).from_device]
    needs = Needs()
    if device and all(not next(o for o in observed if o.mode == m).from_device for m in base):
        text = _page_cache_against_device(wrong, base, e)
        needs = Needs(evict=(base[0], device[0])) if e is None else Needs()
    else:
        text = (f"{joined(wrong)} reads deliver other bytes than {joined(base)} reads{{where}}; no independent read "
                "agrees with either, so which bytes are the file's is not known")
    deviation = words.read_path_differs(observed, wrong, base, None, decided=False, text=text)
    return FileDecision(path=path, verdict=READ_PATH, reference=None, right=(), wrong=wrong, decided=False,
                        conclusions=(unref, deviation), needs=needs, tested=tested)


def _page_cache_against_device(wrong: Sequence[str], base: Sequence[str], e: Eviction | None) -> str:
    """The page cache against the device with nothing published: what the eviction test narrowed it to."""
    if e is not None and e.outcome == "device":
        return (f"direct reads deliver other bytes than {joined(base)} reads{{where}}, and so does the device read "
                f"again through the page cache once its pages were evicted: the device holds the bytes direct reads "
                f"deliver, and the page cache held other ones: either they never reached the disk (a lost or torn "
                f"write) or they went wrong in memory (RAM, a filter driver); nothing published decides which are "
                f"the file's. {words.eviction_words(e)}")
    if e is not None and e.outcome == "page-cache":
        return (f"direct reads deliver other bytes than {joined(base)} reads{{where}}, and the page cache, read again "
                f"from the device once its pages were evicted, gives what it gave before: either direct reads are "
                f"wrong on this machine, or every read through the page cache is changed on its way (a filter "
                f"driver: antivirus, encryption); nothing published decides which. {words.eviction_words(e)}")
    tried = f"; {words.eviction_words(e)}" if e is not None else ""
    return (f"direct reads deliver other bytes than {joined(base)} reads{{where}}, and nothing published decides "
            "which are the file's: either the page cache holds other bytes than the disk (RAM, a filter driver, a VM "
            f"or storage layer, or a write that never reached the disk) or direct reads are wrong on this "
            f"machine{tried}")

