"""A model's layout as plain data (JSON-ready), with long arrays summarised: ``ggaudit info``'s JSON
(:mod:`ggaudit.model_info` is its report)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from .._version import __version__
from .layout import ArrayValue, GGUFFile, MetaValue, Model, Tensor

#: The ``schema`` of :func:`model_to_json`.
SCHEMA = "ggaudit/info/1"


def meta_to_json(entry: MetaValue) -> Any:
    """A metadata value as JSON: scalars as they are, arrays as {type, count, head}."""
    return value_to_json(entry.value)


def value_to_json(value: Any) -> Any:
    if isinstance(value, ArrayValue):
        return {"array_of": value.elem_type.name.lower(), "count": value.count,
                "head": [value_to_json(v) for v in value.head]}
    if isinstance(value, float) and value != value:
        return "nan"
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return "+inf" if value > 0 else "-inf"
    return value


def tensor_to_json(t: Tensor) -> dict[str, Any]:
    return {"name": t.name, "type": t.ggml_type.name, "shape": list(t.shape), "offset": t.offset,
            "nbytes": t.nbytes, "row_bytes": t.row_bytes, "rows": t.n_rows, "file": t.path}


def bytes_per_type(tensors: tuple[Tensor, ...]) -> dict[str, int]:
    totals: Counter[str] = Counter()
    for t in tensors:
        totals[t.ggml_type.name] += t.nbytes
    return dict(sorted(totals.items(), key=lambda kv: (-kv[1], kv[0])))


def _file_to_json(f: GGUFFile) -> dict[str, Any]:
    return {"path": f.path, "size": f.size, "version": f.version, "alignment": f.alignment,
            "data_offset": f.data_offset, "tensor_count": len(f.tensors), "metadata_count": len(f.metadata),
            "metadata": {k: {"type": v.type.name.lower(), "value": meta_to_json(v)} for k, v in f.metadata.items()}}


def model_to_json(model: Model) -> dict[str, Any]:
    """The documented ``ggaudit info --json`` object (docs/json.md)."""
    return {
        "schema": SCHEMA,
        "tool_version": __version__,
        "ok": True,
        "model": model.source,
        "architecture": model.architecture,
        "size": model.size,
        "tensor_count": len(model.tensors),
        "files": [_file_to_json(f) for f in model.files],
        "bytes_per_type": bytes_per_type(model.tensors),
        "tensors": [tensor_to_json(t) for t in model.tensors],
    }
