"""Truth by evidence: which read path delivered a file's right bytes, decided from what each path read.

Pure: digests in, conclusions out, nothing read here (tests/test_check.py walks every case). Buffered and
mmap reads both come from the page cache; direct reads come from the device. The bytes are judged by a
published digest (a store's, a checksum file's, ``--sha256``) when there is one, else by a tensor
manifest's, else by agreement of independent paths: a page-cache path and the direct path delivering the
same bytes. Two page-cache paths agreeing prove nothing about the disk, and no single read is trusted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..verify.manifests.tensor import TensorDigest
from ..verify.report import Mismatch
from ..verify.walk.tensors import compare_tensors

__all__ = ["AGREEMENT", "MANIFEST", "PAGE_CACHE", "PUBLISHED", "Conclusion", "Expectation", "FileDecision",
           "LineDigest", "ManifestLines", "Observed", "decide_file"]

#: What decided which bytes are right (``reference``).
PUBLISHED, MANIFEST, AGREEMENT = "published", "manifest", "agreement"
#: The read paths served from the page cache (the direct path reads the device).
PAGE_CACHE = ("buffered", "mmap")

#: What each verdict is, worst first: a file verdict and a report's verdict are one of these.
DAMAGED, READ_PATH, NONFINITE, UNVERIFIED, INTACT = "damaged", "read-path", "nonfinite", "unverified", "intact"
VERDICTS = (DAMAGED, READ_PATH, NONFINITE, UNVERIFIED, INTACT)


@dataclass(frozen=True, kw_only=True)
class Expectation:
    """A digest the whole file should have: ``algorithm`` (sha256, md5, git-sha1), ``digest`` (hex),
    ``source`` (PUBLISHED or MANIFEST) and ``what`` it is, in words (``the Ollama manifest's layer digest``)."""

    algorithm: str
    digest: str
    source: str
    what: str


@dataclass(frozen=True, kw_only=True)
class Observed:
    """What one read path delivered of one file: ``fingerprint`` (xxh3-128 of every byte, on every path),
    ``digests`` (the expectations' algorithms, on the paths that computed them) and ``tensors`` (each
    tensor's xxh3-128 and its row groups')."""

    mode: str
    fingerprint: str
    digests: Mapping[str, str] = field(default_factory=dict)
    tensors: tuple[TensorDigest, ...] = ()
    #: With a llama-gguf-hash manifest: each tensor's digest of the type its line gives, by name, and the
    #: model line's (None when it is not compared); None without one.
    lines: Mapping[str, str] | None = None
    model_line: str | None = None


@dataclass(frozen=True)
class LineDigest:
    """One line of a llama-gguf-hash manifest: its type (xxh64, xxh3, sha1, sha256, uuid), digest, line number."""

    algorithm: str
    digest: str
    line: int

    def to_json(self) -> dict[str, Any]:
        return {"algorithm": self.algorithm, "digest": self.digest, "line": self.line}


@dataclass(frozen=True, kw_only=True)
class ManifestLines:
    """What a llama-gguf-hash manifest says of one file: per tensor the line compared (of the strongest type
    it gives), the model line (every tensor's bytes in header order) or None, why that line is not compared
    (``model_why``, None when it is), the tensors its lines name that the file lacks (``missing``) and the
    file's tensors no line names (``unnamed``), and ``what`` the manifest is, in words. It gives one digest
    per tensor: a difference is located to a tensor, never to rows."""

    tensors: Mapping[str, LineDigest]
    model: LineDigest | None
    model_why: str | None
    missing: tuple[str, ...]
    unnamed: tuple[str, ...]
    what: str
    source: str = MANIFEST

    @property
    def compared_model(self) -> LineDigest | None:
        return self.model if self.model_why is None else None

    @property
    def comparable(self) -> bool:
        """Whether a line can be compared here (a tensor's, or the model line)."""
        return bool(self.tensors or self.compared_model or self.missing or self.unnamed)


@dataclass(frozen=True, kw_only=True)
class Conclusion:
    """One thing the check concluded: ``code`` (docs/json.md lists them), ``text`` (a sentence, untrusted
    names exact: escaped when shown) and ``evidence`` (its exact parts, as JSON)."""

    code: str
    text: str
    evidence: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "text": self.text, "evidence": dict(self.evidence)}


@dataclass(frozen=True, kw_only=True)
class FileDecision:
    """The decision for one file: its ``verdict``, what decided it (``reference``: PUBLISHED, MANIFEST,
    AGREEMENT, or None when nothing could), the paths whose bytes are right and those that deviate
    (``decided`` False: the deviation is seen but which side is right is not known), and the conclusions."""

    path: str
    verdict: str
    reference: str | None
    right: tuple[str, ...]
    wrong: tuple[str, ...]
    decided: bool
    conclusions: tuple[Conclusion, ...]
    differences: tuple[Mismatch, ...] = ()   # tensors and row ranges where the file differs from the manifest


def decide_file(path: str, observed: Sequence[Observed], *, published: Expectation | None = None,
                manifest: Expectation | None = None, expected_tensors: Sequence[TensorDigest] = (),
                lines: ManifestLines | None = None) -> FileDecision:
    """Decide which of ``observed`` (one per read path, buffered first) delivered the file's right bytes.

    ``published``: the digest its publisher gives; ``manifest``: the whole-file digest of a tensor
    manifest, whose ``expected_tensors`` localise a difference; ``lines``: a llama-gguf-hash manifest's
    lines of the file (each tensor's digest, the model line), which every path's ``lines`` are compared
    with. The published digest decides when there is one; the manifest's when there is no published one;
    agreement of a page-cache path with the direct path when there is neither.
    """
    if not observed:
        raise ValueError("no read path observed the file")
    if lines is not None and not lines.comparable:
        raise ValueError("the manifest's lines of the file give nothing that can be compared")
    reference: Expectation | ManifestLines | None = published or manifest or lines
    extra = [_manifest_disagrees(published, manifest)] if published and manifest and \
        published.algorithm == manifest.algorithm and published.digest != manifest.digest else []
    if reference is None:
        return _by_agreement(path, observed)
    decision = _by_reference(path, observed, reference, expected_tensors, lines)
    if published and lines:
        extra += _lines_disagree(published, lines, [o for o in observed if o.mode in decision.right])
    return _with(decision, extra) if extra else decision


def _with(decision: FileDecision, more: Sequence[Conclusion]) -> FileDecision:
    return FileDecision(path=decision.path, verdict=decision.verdict, reference=decision.reference,
                        right=decision.right, wrong=decision.wrong, decided=decision.decided,
                        conclusions=(*decision.conclusions, *more), differences=decision.differences)


def _modes(observed: Sequence[Observed]) -> tuple[str, ...]:
    return tuple(o.mode for o in observed)


def _matches(o: Observed, ref: Expectation | ManifestLines, observed: Sequence[Observed]) -> bool:
    """Whether path ``o`` delivered the bytes ``ref`` describes: by the digest it computed, or (a path that
    computed none, mmap) by the same fingerprint as a path whose digest matched; by every line's digest."""
    if isinstance(ref, ManifestLines):
        return not _line_differences("", ref, o)
    if ref.algorithm in o.digests:
        return o.digests[ref.algorithm] == ref.digest
    return any(p.fingerprint == o.fingerprint and p.digests.get(ref.algorithm) == ref.digest for p in observed)


def _require_computed(ref: Expectation | ManifestLines, observed: Sequence[Observed]) -> None:
    if isinstance(ref, ManifestLines):
        if any(o.lines is None for o in observed):
            raise ValueError("a read path did not compute the digests of the manifest's lines")
    elif not any(ref.algorithm in o.digests for o in observed):
        raise ValueError(f"no read path computed the {ref.algorithm} the reference is compared by")


def _by_reference(path: str, observed: Sequence[Observed], ref: Expectation | ManifestLines,
                  expected_tensors: Sequence[TensorDigest], lines: ManifestLines | None) -> FileDecision:
    _require_computed(ref, observed)
    right = tuple(o.mode for o in observed if _matches(o, ref, observed))
    wrong = tuple(o.mode for o in observed if o.mode not in right)
    agree = _agree(observed)
    if not wrong:
        found = [_matches_reference(ref, right)] + ([agree] if agree else [])
        return FileDecision(path=path, verdict=INTACT, reference=ref.source, right=right, wrong=(), decided=True,
                            conclusions=tuple(found))
    if right:
        deviation = _read_path_differs(observed, wrong, right, ref.source, decided=True)
        return FileDecision(path=path, verdict=READ_PATH, reference=ref.source, right=right, wrong=wrong, decided=True,
                            conclusions=(_matches_reference(ref, right), deviation))
    # No path delivered what was published: the file itself differs. The device's read says what is on disk.
    disk = _device_view(observed)
    differences = tuple(compare_tensors(expected_tensors, disk.tensors, path) if expected_tensors else
                        _line_differences(path, lines, disk) if lines is not None else ())
    found = [_differs(ref, disk, _modes(observed), differences)]
    if agree:
        found.append(agree)
    else:
        others = _by_agreement(path, observed)
        found.extend(c for c in others.conclusions if c.code == "read-path-differs")
    return FileDecision(path=path, verdict=DAMAGED, reference=ref.source, right=(), wrong=wrong, decided=True,
                        conclusions=tuple(found), differences=differences)


def _line_differences(path: str, lines: ManifestLines, o: Observed) -> list[Mismatch]:
    """Where what path ``o`` delivered differs from the manifest's lines, in file order: each tensor whose
    digest differs (the whole tensor: the lines give no row ranges), each tensor a line names that the file
    lacks or the file holds that no line names, and the model line."""
    seen = o.lines or {}
    spans = {t.name: (t.offset, t.nbytes) for t in o.tensors}
    found = [Mismatch(kind="tensor-missing", path=path, subject=name, tensor=name,
                      detail="tensor in the manifest, not in the file") for name in lines.missing]
    located = [Mismatch(kind="tensor-extra", path=path, subject=name, offset=spans[name][0], length=spans[name][1],
                        tensor=name, detail="tensor in the file, not in the manifest")
               for name in lines.unnamed if name in spans]
    located += [Mismatch(kind="tensor-data", path=path, subject=name, expected=want.digest, actual=seen.get(name),
                         offset=spans.get(name, (None, None))[0], length=spans.get(name, (None, None))[1], tensor=name,
                         detail=f"{want.algorithm} of the tensor differs (manifest line {want.line})")
                for name, want in lines.tensors.items() if seen.get(name) != want.digest]
    found += sorted(located, key=lambda m: -1 if m.offset is None else m.offset)
    model = lines.compared_model
    if model is not None and o.model_line != model.digest:
        start = min((t.offset for t in o.tensors), default=0)
        end = max((t.offset + t.nbytes for t in o.tensors), default=start)
        found.append(Mismatch(kind="model-data", path=path, subject="all tensor data", expected=model.digest,
                              actual=o.model_line, offset=start, length=end - start,
                              detail=f"{model.algorithm} of all tensor data differs (manifest line {model.line})"))
    return found


def _device_view(observed: Sequence[Observed]) -> Observed:
    """The read closest to the disk: direct when it ran, else the first (buffered)."""
    return next((o for o in observed if o.mode == "direct"), observed[0])


def _by_agreement(path: str, observed: Sequence[Observed]) -> FileDecision:
    modes = _modes(observed)
    unref = _no_reference()
    agree = _agree(observed)
    if agree is not None or len(observed) == 1:
        found = (unref, agree) if agree else (unref,)
        return FileDecision(path=path, verdict=UNVERIFIED, reference=None, right=modes, wrong=(), decided=False,
                            conclusions=found)
    groups = _groups(observed)
    independent = [g for g in groups if "direct" in g and any(m in PAGE_CACHE for m in g)]
    if independent:
        right = independent[0]
        wrong = tuple(m for m in modes if m not in right)
        deviation = _read_path_differs(observed, wrong, right, AGREEMENT, decided=True)
        return FileDecision(path=path, verdict=READ_PATH, reference=AGREEMENT, right=right, wrong=wrong,
                            decided=True, conclusions=(unref, deviation))
    # No two independent paths agree: the deviation is certain, which side holds the file's bytes is not.
    base = next(g for g in groups if modes[0] in g)
    wrong = tuple(m for m in modes if m not in base)
    deviation = _read_path_differs(observed, wrong, base, None, decided=False)
    return FileDecision(path=path, verdict=READ_PATH, reference=None, right=(), wrong=wrong, decided=False,
                        conclusions=(unref, deviation))


def _groups(observed: Sequence[Observed]) -> list[tuple[str, ...]]:
    """The paths grouped by the bytes they delivered, in the order first met."""
    by_print: dict[str, list[str]] = {}
    for o in observed:
        by_print.setdefault(o.fingerprint, []).append(o.mode)
    return [tuple(g) for g in by_print.values()]


def _agree(observed: Sequence[Observed]) -> Conclusion | None:
    """``read-paths-agree`` when two or more paths ran and all delivered the same bytes, else None."""
    if len(observed) < 2 or len(_groups(observed)) != 1:
        return None
    modes = _modes(observed)
    independent = "direct" in modes and any(m in PAGE_CACHE for m in modes)
    why = ("the page cache and the device agree" if independent else
           "both come from the page cache, so this says nothing of the disk")
    return Conclusion(code="read-paths-agree", text=f"{_and(modes)} reads delivered the same bytes ({why})",
                      evidence={"paths": list(modes), "independent": independent})


def _matches_reference(ref: Expectation | ManifestLines, paths: Sequence[str]) -> Conclusion:
    if isinstance(ref, ManifestLines):
        return _matches_lines(ref, paths)
    code = "matches-published" if ref.source == PUBLISHED else "matches-manifest"
    return Conclusion(code=code, text=f"the bytes read through {_and(paths)} match {ref.what} ({ref.algorithm} "
                                      f"{ref.digest})",
                      evidence={"algorithm": ref.algorithm, "digest": ref.digest, "source": ref.what,
                                "paths": list(paths)})


def _differs(ref: Expectation | ManifestLines, disk: Observed, paths: Sequence[str],
             differences: Sequence[Mismatch]) -> Conclusion:
    if isinstance(ref, ManifestLines):
        return _differs_from_lines(ref, disk, paths, differences)
    code = "differs-from-published" if ref.source == PUBLISHED else "differs-from-manifest"
    tensors = [_tensor_json(m) for m in differences if m.tensor is not None]
    where = ""
    if tensors:
        shown = [f"{t['tensor']} rows {t['rows'][0]}-{t['rows'][1]}" if t["rows"] else str(t["tensor"])
                 for t in tensors[:5]]
        where = f"; the bytes that differ: {', '.join(shown)}{', ...' if len(tensors) > 5 else ''}"
    actual = disk.digests.get(ref.algorithm)
    return Conclusion(code=code, text=f"the file on disk differs from {ref.what}: every read path ({_and(paths)}) "
                                      f"delivered the same other bytes{where}" if len(set(paths)) > 1 else
                      f"the file differs from {ref.what}{where}",
                      evidence={"algorithm": ref.algorithm, "expected": ref.digest, "actual": actual,
                                "source": ref.what, "paths": list(paths), "tensors": tensors})


def _tensor_json(m: Mismatch) -> dict[str, Any]:
    return {"tensor": m.tensor, "rows": None if m.rows is None else list(m.rows), "offset": m.offset,
            "length": m.length, "kind": m.kind}


#: What a llama-gguf-hash manifest cannot say: it gives one digest per tensor.
NO_ROW_RANGES = "not available: llama-gguf-hash gives one digest per tensor, so a difference is located to the tensor"


def _algorithms(lines: ManifestLines) -> dict[str, int]:
    """How many tensors' lines of each type are compared, strongest first as the manifest's lines were chosen."""
    counted: dict[str, int] = {}
    for line in lines.tensors.values():
        counted[line.algorithm] = counted.get(line.algorithm, 0) + 1
    return dict(sorted(counted.items()))


def _model_json(lines: ManifestLines) -> dict[str, Any] | None:
    if lines.model is None:
        return None
    return {**lines.model.to_json(), "compared": lines.model_why is None, "why_not": lines.model_why}


def _model_words(lines: ManifestLines) -> str:
    if lines.model is None:
        return ""
    if lines.model_why is not None:
        return (f"; its model line ({lines.model.algorithm}, line {lines.model.line}) was not compared: "
                f"{lines.model_why}")
    return f", and all tensor data by its model line ({lines.model.algorithm} {lines.model.digest})"


def _disk_model_json(lines: ManifestLines, disk: Observed) -> dict[str, Any] | None:
    """The model line, and what the device's read gave for it when it was compared."""
    found = _model_json(lines)
    return found if found is None or lines.model_why is not None else {**found, "actual": disk.model_line}


def _matches_lines(lines: ManifestLines, paths: Sequence[str]) -> Conclusion:
    by = ", ".join(f"{n} by {a}" for a, n in _algorithms(lines).items())
    count = len(lines.tensors)
    return Conclusion(code="matches-manifest",
                      text=f"the bytes read through {_and(paths)} match {lines.what}: {count} "
                           f"tensor{'s' if count != 1 else ''}{f' ({by})' if by else ''}{_model_words(lines)}",
                      evidence={"format": "llama-gguf-hash", "source": lines.what, "paths": list(paths),
                                "tensors": count, "algorithms": _algorithms(lines), "model": _model_json(lines)})


def _differs_from_lines(lines: ManifestLines, disk: Observed, paths: Sequence[str],
                        differences: Sequence[Mismatch]) -> Conclusion:
    tensors = [{**_tensor_json(m), "algorithm": line.algorithm, "expected": m.expected, "actual": m.actual,
                "line": line.line} if (line := lines.tensors.get(m.tensor or "")) and m.kind == "tensor-data"
               else _tensor_json(m) for m in differences if m.tensor is not None]
    names = [f"{t['tensor']} ({t['kind']})" if t["kind"] != "tensor-data" else str(t["tensor"]) for t in tensors]
    where = (f"; the tensors that differ (whole tensors: llama-gguf-hash gives no row ranges): {', '.join(names[:5])}"
             f"{', ...' if len(names) > 5 else ''}" if names else "")
    model = next((m for m in differences if m.kind == "model-data"), None)
    if model is not None:
        where += f"{'; and' if names else '; '} all tensor data differs from its model line"
    every = f": every read path ({_and(paths)}) delivered the same other bytes" if len(set(paths)) > 1 else ""
    return Conclusion(code="differs-from-manifest",
                      text=f"the file on disk differs from {lines.what}{every}{where}",
                      evidence={"format": "llama-gguf-hash", "source": lines.what, "paths": list(paths),
                                "tensors": tensors, "model": _disk_model_json(lines, disk),
                                "row_ranges": NO_ROW_RANGES})


def _lines_disagree(published: Expectation, lines: ManifestLines, right: Sequence[Observed]) -> list[Conclusion]:
    """``manifest-differs-from-published`` when the bytes the published digest says are right differ from
    the manifest's lines: it was made from another file; the published digest decides."""
    if not right:
        return []
    differences = _line_differences("", lines, right[0])
    if not differences:
        return []
    names = [m.subject for m in differences]
    return [Conclusion(code="manifest-differs-from-published",
                       text=f"the manifest's lines are not what {published.what} describes: the bytes it says are "
                            f"right differ from them ({', '.join(names[:5])}{', ...' if len(names) > 5 else ''}): "
                            "it was made from another file than the published one; the published digest decides",
                       evidence={"format": "llama-gguf-hash", "published": published.digest, "tensors": names})]


def _read_path_differs(observed: Sequence[Observed], wrong: Sequence[str], right: Sequence[str],
                       reference: str | None, *, decided: bool) -> Conclusion:
    by_mode = {o.mode: o for o in observed}
    good = by_mode[right[0]]
    tensors = sorted({m.tensor for w in wrong for m in compare_tensors(good.tensors, by_mode[w].tensors, "")
                      if m.tensor is not None})
    return Conclusion(code="read-path-differs", text=_deviation_text(wrong, right, decided, tensors),
                      evidence={"paths": list(wrong), "agree": list(right), "reference": reference,
                                "decided": decided, "tensors": tensors})


def _deviation_text(wrong: Sequence[str], right: Sequence[str], decided: bool, tensors: Sequence[str]) -> str:
    where = f" for tensors {', '.join(tensors[:5])}{', ...' if len(tensors) > 5 else ''}" if tensors else ""
    if not decided:
        if "direct" in wrong and set(right) <= set(PAGE_CACHE):
            return (f"direct reads deliver other bytes than {_and(right)} reads{where}, and nothing published "
                    "decides which are the file's: either the page cache holds other bytes than the disk (RAM, "
                    "a filter driver, a VM or storage layer) or direct reads are wrong on this machine")
        return (f"{_and(wrong)} reads deliver other bytes than {_and(right)} reads{where}; no independent read "
                "agrees with either, so which bytes are the file's is not known")
    if wrong == ("mmap",):
        return (f"reading through a memory mapping on this machine delivers other bytes{where}; the file on disk "
                "is intact")
    if tuple(wrong) == PAGE_CACHE or set(wrong) == set(PAGE_CACHE):
        return (f"the page cache holds other bytes than the disk{where} (RAM, a filter driver, a VM or storage "
                "layer): buffered and mmap reads agree with each other and differ from direct reads; the file "
                "on disk is intact")
    if wrong == ("direct",):
        return f"direct reads deliver wrong bytes on this machine{where}; the file and the page cache are right"
    return f"{_and(wrong)} reads deliver other bytes on this machine{where}; the file on disk is intact"


def _no_reference() -> Conclusion:
    return Conclusion(code="no-published-reference",
                      text="no published reference: the file can only be checked against itself")


def _manifest_disagrees(published: Expectation, manifest: Expectation) -> Conclusion:
    return Conclusion(code="manifest-differs-from-published",
                      text=f"the manifest's {manifest.algorithm} of the file is not {published.what}: it was made "
                           "from another file than the published one; the published digest decides",
                      evidence={"algorithm": manifest.algorithm, "manifest": manifest.digest,
                                "published": published.digest})


def _and(items: Sequence[str]) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
