"""A llama-gguf-hash manifest's lines in a check's decision: where a path's bytes differ from them, and the
conclusions that say so. The lines give one digest per tensor (and a model line of all tensor data), so a
difference is located to a tensor, never to rows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..wording import joined
from ..verify.report import Mismatch
from .facts import Conclusion, Expectation, ManifestLines, Observed

__all__ = ["NO_ROW_RANGES", "differs_from_lines", "line_differences", "lines_disagree", "matches_lines"]

#: What a llama-gguf-hash manifest cannot say: it gives one digest per tensor.
NO_ROW_RANGES = "not available: llama-gguf-hash gives one digest per tensor, so a difference is located to the tensor"


def line_differences(path: str, lines: ManifestLines, o: Observed) -> list[Mismatch]:
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


def matches_lines(lines: ManifestLines, paths: Sequence[str]) -> Conclusion:
    by = ", ".join(f"{n} by {a}" for a, n in _algorithms(lines).items())
    count = len(lines.tensors)
    return Conclusion(code="matches-manifest",
                      text=f"the bytes read through {joined(paths)} match {lines.what}: {count} "
                           f"tensor{'s' if count != 1 else ''}{f' ({by})' if by else ''}{_model_words(lines)}",
                      evidence={"format": "llama-gguf-hash", "source": lines.what, "paths": list(paths),
                                "tensors": count, "algorithms": _algorithms(lines), "model": _model_json(lines)})


def differs_from_lines(lines: ManifestLines, disk: Observed, paths: Sequence[str], differences: Sequence[Mismatch],
                       subject: str, every: str) -> Conclusion:
    """``differs-from-manifest`` of a llama-gguf-hash manifest: ``disk`` is the read the differences were
    taken from, ``subject`` what it shows ("the file on disk" when it read the device), ``every`` what the
    paths' agreement says (": every read path ... delivered the same other bytes", or "")."""
    tensors = [{**tensor_json(m), "algorithm": line.algorithm, "expected": m.expected, "actual": m.actual,
                "line": line.line} if (line := lines.tensors.get(m.tensor or "")) and m.kind == "tensor-data"
               else tensor_json(m) for m in differences if m.tensor is not None]
    names = [f"{t['tensor']} ({t['kind']})" if t["kind"] != "tensor-data" else str(t["tensor"]) for t in tensors]
    where = (f"; the tensors that differ (whole tensors: llama-gguf-hash gives no row ranges): {', '.join(names[:5])}"
             f"{', ...' if len(names) > 5 else ''}" if names else "")
    model = next((m for m in differences if m.kind == "model-data"), None)
    if model is not None:
        where += f"{'; and' if names else '; '} all tensor data differs from its model line"
    return Conclusion(code="differs-from-manifest",
                      text=f"{subject} differs from {lines.what}{every}{where}",
                      evidence={"format": "llama-gguf-hash", "source": lines.what, "paths": list(paths),
                                "tensors": tensors, "model": _disk_model_json(lines, disk),
                                "row_ranges": NO_ROW_RANGES})


def lines_disagree(published: Expectation, lines: ManifestLines, right: Observed | None) -> list[Conclusion]:
    """``manifest-differs-from-published`` when the bytes the published digest says are right differ from
    the manifest's lines: it was made from another file; the published digest decides."""
    if right is None:
        return []
    differences = line_differences("", lines, right)
    if not differences:
        return []
    names = [m.subject for m in differences]
    return [Conclusion(code="manifest-differs-from-published",
                       text=f"the manifest's lines are not what {published.what} describes: the bytes it says are "
                            f"right differ from them ({', '.join(names[:5])}{', ...' if len(names) > 5 else ''}): "
                            "it was made from another file than the published one; the published digest decides",
                       evidence={"format": "llama-gguf-hash", "published": published.digest, "tensors": names})]


def tensor_json(m: Mismatch) -> dict[str, Any]:
    return {"tensor": m.tensor, "rows": None if m.rows is None else list(m.rows), "offset": m.offset,
            "length": m.length, "kind": m.kind}
