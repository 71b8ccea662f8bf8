"""Write small GGUF files byte for byte: for tests, fixtures and benchmarks, here and in other projects.

Deterministic: the same arguments always give the same bytes. Metadata values are written with the
type their Python value implies (str, bool, int as u32 or i64 when negative or large, float as f32,
lists as arrays of the first element's type); pass a :class:`Typed` to choose the type yourself.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Any
from collections.abc import Iterable, Mapping, Sequence

from .blocks import GGMLQuantizationType, GGUFValueType, layout_of

#: GGMLQuantizationType and GGUFValueType are blocks' (the one table), kept here beside what takes them.
__all__ = ["GGMLQuantizationType", "GGUFValueType", "TensorSpec", "Typed", "encode_kv", "encode_string",
           "encode_tensor_info", "gguf_bytes", "layout_tensors", "write_gguf"]


@dataclass(frozen=True)
class Typed:
    """A metadata value with an explicit GGUF type (for arrays, *type* is the element type)."""

    type: GGUFValueType
    value: Any
    is_array: bool = False


@dataclass(frozen=True)
class TensorSpec:
    """One tensor to write: name, GGML type, shape in ggml order (ne0 first) and its raw bytes."""

    name: str
    ggml_type: GGMLQuantizationType
    shape: tuple[int, ...]
    data: bytes

    def expected_nbytes(self) -> int:
        facts = layout_of(self.ggml_type)
        rows = 1
        for ne in self.shape[1:]:
            rows *= ne
        return self.shape[0] // facts.block_size * facts.block_bytes * rows


_SCALAR = {
    GGUFValueType.UINT8: "<B", GGUFValueType.INT8: "<b", GGUFValueType.UINT16: "<H",
    GGUFValueType.INT16: "<h", GGUFValueType.UINT32: "<I", GGUFValueType.INT32: "<i",
    GGUFValueType.FLOAT32: "<f", GGUFValueType.BOOL: "<?", GGUFValueType.UINT64: "<Q",
    GGUFValueType.INT64: "<q", GGUFValueType.FLOAT64: "<d",
}


def encode_string(text: str | bytes) -> bytes:
    raw = text.encode("utf-8") if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def _infer_type(value: Any) -> GGUFValueType:
    if isinstance(value, bool):
        return GGUFValueType.BOOL
    if isinstance(value, int):
        return GGUFValueType.UINT32 if 0 <= value < (1 << 32) else GGUFValueType.INT64
    if isinstance(value, float):
        return GGUFValueType.FLOAT32
    if isinstance(value, (str, bytes)):
        return GGUFValueType.STRING
    if isinstance(value, (list, tuple)):
        return GGUFValueType.ARRAY
    raise TypeError(f"cannot infer a GGUF type for {value!r}")


def _encode_value(vtype: GGUFValueType, value: Any) -> bytes:
    # Compared by value: a caller may name the type with gguf-py's enum of the same ids.
    if vtype == GGUFValueType.STRING:
        return encode_string(value)
    if vtype == GGUFValueType.ARRAY:
        return _encode_array(_infer_type(value[0]) if value else GGUFValueType.UINT32, value)
    return struct.pack(_SCALAR[GGUFValueType(vtype)], value)


def _encode_array(etype: GGUFValueType, values: Sequence[Any]) -> bytes:
    head = struct.pack("<IQ", etype, len(values))
    return head + b"".join(_encode_value(etype, v) for v in values)


def encode_kv(key: str, value: Any) -> bytes:
    """One metadata pair as GGUF bytes."""
    if isinstance(value, Typed):
        if value.is_array:
            return encode_string(key) + struct.pack("<I", GGUFValueType.ARRAY) + _encode_array(value.type, value.value)
        return encode_string(key) + struct.pack("<I", value.type) + _encode_value(value.type, value.value)
    vtype = _infer_type(value)
    return encode_string(key) + struct.pack("<I", vtype) + _encode_value(vtype, value)


def encode_tensor_info(name: str, ggml_type: int, shape: Sequence[int], rel_offset: int) -> bytes:
    return (encode_string(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<q", n) for n in shape)
            + struct.pack("<IQ", int(ggml_type), rel_offset))


def _align(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


def layout_tensors(tensors: Iterable[TensorSpec], alignment: int) -> list[int]:
    """Data-section-relative offsets for *tensors*, each aligned, in order."""
    offsets, pos = [], 0
    for t in tensors:
        offsets.append(pos)
        pos = _align(pos + len(t.data), alignment)
    return offsets


def gguf_bytes(tensors: Sequence[TensorSpec], metadata: Mapping[str, Any] | None = None, *,
               alignment: int = 32, version: int = 3) -> tuple[bytes, dict[str, int]]:
    """The whole file as bytes, and each tensor's absolute data offset."""
    for t in tensors:
        if len(t.data) != t.expected_nbytes():
            raise ValueError(f"{t.name}: {len(t.data)} bytes given, {t.expected_nbytes()} expected")
    meta = dict(metadata or {})
    if alignment != 32 and "general.alignment" not in meta:
        meta["general.alignment"] = Typed(GGUFValueType.UINT32, alignment)
    rel = layout_tensors(tensors, alignment)
    header = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(meta))
    header += b"".join(encode_kv(k, v) for k, v in meta.items())
    header += b"".join(encode_tensor_info(t.name, t.ggml_type, t.shape, r) for t, r in zip(tensors, rel, strict=True))
    data_offset = _align(len(header), alignment)
    out = bytearray(header) + bytes(data_offset - len(header))
    for t, r in zip(tensors, rel, strict=True):
        out += bytes(data_offset + r - len(out)) + t.data
    return bytes(out), {t.name: data_offset + r for t, r in zip(tensors, rel, strict=True)}


def write_gguf(path: str | os.PathLike[str], tensors: Sequence[TensorSpec],
               metadata: Mapping[str, Any] | None = None, *, alignment: int = 32,
               version: int = 3) -> dict[str, int]:
    """Write a GGUF file to *path*; returns each tensor's absolute data offset."""
    data, offsets = gguf_bytes(tensors, metadata, alignment=alignment, version=version)
    with open(path, "wb") as f:
        f.write(data)
    return offsets
