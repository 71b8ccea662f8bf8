"""Helpers many tests share: the repository's paths, small models, an independent header walker, and a
CLI runner that checks the one-line error contract (the helpers of one area are its ``*_support.py``).

The header walker here is deliberately separate from ``ggaudit.format.layout``: it lists where every field of
a *well-formed* header starts and ends, so a truncation test can say which offset a cut must be
reported at without trusting the parser under test.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import importlib.util
import shutil
import struct
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from collections.abc import Iterator, Sequence

import numpy as np
import pytest
from click.testing import CliRunner, Result
from gguf import GGML_QUANT_SIZES, GGUFValueType as V

from ggaudit.format.blocks import LAYOUTS, GGMLQuantizationType as T
from ggaudit.format.build import TensorSpec, Typed, write_gguf
from ggaudit.cli import main

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"

_SCALAR_SIZE = {V.UINT8: 1, V.INT8: 1, V.UINT16: 2, V.INT16: 2, V.UINT32: 4, V.INT32: 4, V.FLOAT32: 4,
                V.BOOL: 1, V.UINT64: 8, V.INT64: 8, V.FLOAT64: 8}
_MIN_ELEM = {V.STRING: 8, V.ARRAY: 12}
MIN_KV, MIN_TENSOR_INFO = 13, 32


def load_script(name: str) -> ModuleType:
    """A script under scripts/ imported as a module (they are not a package)."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    spec = importlib.util.spec_from_file_location(f"ggaudit_{name}", REPO / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fixture_files() -> list[Path]:
    """The bundled fixtures (all shards of split sets included), sorted. They are committed, so finding
    none fails the test that asked (tests/test_fixtures.py checks each one against its generator)."""
    found = sorted(FIXTURES.glob("*.gguf"))
    assert found, f"no fixtures in {FIXTURES}: they are committed (scripts/make_fixtures.py writes them)"
    return found


def tensor_payload(ggml_type: T, shape: tuple[int, ...], seed: int) -> bytes:
    """Random bytes of the right size whose float fields are all finite (fp16 0x3C00 = 1.0)."""
    facts = LAYOUTS[ggml_type]
    rows = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    n_blocks = shape[0] // facts.block_size * rows
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, size=(n_blocks, facts.block_bytes), dtype=np.uint8)
    if facts.is_float_elements:
        width = facts.block_bytes
        values = rng.standard_normal(n_blocks).astype({2: "<f2", 4: "<f4", 8: "<f8"}[width])
        if ggml_type is T.BF16:
            values = (rng.standard_normal(n_blocks).astype("<f4").view("<u4") >> 16).astype("<u2")
        return values.tobytes()
    for field in facts.fields:
        if field.size == 2:
            data[:, field.offset:field.offset + 2] = np.frombuffer(b"\x00\x3c", np.uint8)
        elif field.size == 4:
            data[:, field.offset:field.offset + 4] = np.frombuffer(struct.pack("<f", 1.0), np.uint8)
        elif field.size == 1:
            data[:, field.offset] = 0x7E
        elif field.size == 8:   # IQ1_M: clear the top nibbles of the four scale words (scale 0.0)
            words = data[:, field.offset:field.offset + 8].copy().view("<u2") & 0x0FFF
            data[:, field.offset:field.offset + 8] = words.view(np.uint8)
    return data.tobytes()


def all_types_specs(rows: int = 2) -> list[TensorSpec]:
    """One small 2-D tensor of every GGML type ggaudit knows."""
    specs = []
    for i, (ggml_type, facts) in enumerate(sorted(LAYOUTS.items(), key=lambda kv: kv[0].value)):
        ne0 = facts.block_size * (2 if facts.block_size > 1 else 8)
        shape = (ne0, rows)
        specs.append(TensorSpec(f"t.{ggml_type.name.lower()}", ggml_type, shape,
                                tensor_payload(ggml_type, shape, seed=i)))
    return specs


RICH_METADATA = {
    "general.architecture": "llama",
    "general.name": "rich",
    "general.alignment": Typed(V.UINT32, 64),
    "tokenizer.ggml.tokens": [f"tok{i}" for i in range(40)],
    "tokenizer.ggml.scores": [float(i) for i in range(20)],
    "test.nested": Typed(V.ARRAY, [[1, 2], [3]], is_array=True),
    "test.u8": Typed(V.UINT8, 7),
    "test.i64": -5,
    "test.f64": Typed(V.FLOAT64, 2.5),
    "test.flag": True,
}


def write_rich_model(path: Path) -> Path:
    """A model with every kind of metadata value and one tensor of each type (alignment 64)."""
    write_gguf(path, all_types_specs(), RICH_METADATA, alignment=64)
    return path


def write_split_set(folder: Path, prefix: str = "split") -> list[Path]:
    """A two-shard split set; returns both shard paths."""
    specs = all_types_specs()[:6]
    paths = []
    for no, part in enumerate((specs[:3], specs[3:])):
        path = folder / f"{prefix}-{no + 1:05d}-of-00002.gguf"
        meta = {"general.architecture": "llama", "split.no": Typed(V.UINT16, no),
                "split.count": Typed(V.UINT16, 2), "split.tensors.count": Typed(V.INT32, len(specs))}
        write_gguf(path, part, meta)
        paths.append(path)
    return paths


def write_small_model(path: Path, name: str = "token_embd.weight", rows: int = 64,
                      ggml_type: T = T.Q8_0, metadata: dict | None = None) -> Path:
    ne0 = 64
    shape = (ne0, rows)
    write_gguf(path, [TensorSpec(name, ggml_type, shape, tensor_payload(ggml_type, shape, seed=3))],
               {"general.architecture": "llama", **(metadata or {})})
    return path


def write_trailing_model(path: Path) -> Path:
    """A clean small model with 4 bytes appended after its last tensor: a ``trailing`` (structure) finding."""
    write_small_model(path)
    with path.open("ab") as f:
        f.write(b"\x01\x02\x03\x04")
    return path


# --- the independent header walker ----------------------------------------------------------------

@dataclass(frozen=True)
class Leaf:
    """A field a parser must read whole: it starts at ``start`` and needs bytes up to ``end``.

    ``guards`` are earlier fields whose counts or lengths already promise bytes past a cut that falls
    inside this leaf (an array count, a string length): a parser may report the cut at any of them.
    """

    start: int
    end: int
    section: str
    guards: tuple[tuple[int, int], ...] = ()   # (offset of the count/length field, bytes it promises up to)
    kind: str = ""      # "count", "length" (a string's u64 length prefix), "dim", "offset", or ""


@dataclass(frozen=True)
class HeaderMap:
    leaves: tuple[Leaf, ...]
    header_end: int
    n_tensors: int
    n_kv: int
    meta_end: int
    tensor_offset_fields: tuple[tuple[str, int, int], ...]   # (name, offset of the offset field, data end)
    data_offset: int

    @functools.cached_property
    def leaf_ends(self) -> list[int]:
        return [leaf.end for leaf in self.leaves]


class _Walk:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos, self.leaves = data, 0, []

    def leaf(self, n: int, section: str, guards: tuple = (), kind: str = "") -> int:
        start = self.pos
        self.pos += n
        self.leaves.append(Leaf(start, self.pos, section, guards, kind))
        return start

    def u32(self, section: str, guards: tuple = (), kind: str = "") -> int:
        start = self.leaf(4, section, guards, kind)
        return struct.unpack_from("<I", self.data, start)[0]

    def u64(self, section: str, guards: tuple = (), kind: str = "") -> int:
        start = self.leaf(8, section, guards, kind)
        return struct.unpack_from("<Q", self.data, start)[0]

    def string(self, section: str, guards: tuple = ()) -> str:
        (n,) = struct.unpack_from("<Q", self.data, self.pos)
        start = self.leaf(8 + n, section, guards, "length")
        return self.data[start + 8:start + 8 + n].decode("utf-8", "replace")

    def value(self, vtype: int, section: str, guards: tuple) -> None:
        if vtype == V.STRING:
            self.string(section, guards)
        elif vtype == V.ARRAY:
            etype = self.u32(section, guards)
            count_at = self.pos
            count = self.u64(section, guards, "count")
            promise = (count_at, self.pos + count * (_MIN_ELEM.get(V(etype)) or _SCALAR_SIZE[V(etype)]))
            for _ in range(count):
                self.value(etype, section, (*guards, promise))
        else:
            self.leaf(_SCALAR_SIZE[V(vtype)], section, guards)


def walk_header(data: bytes) -> HeaderMap:
    """Map every field of a well-formed little-endian GGUF header held in ``data``."""
    w = _Walk(data)
    w.leaf(4, "magic")
    w.u32("version")
    n_tensors = w.u64("tensor_count", kind="count")
    n_kv = w.u64("metadata_kv_count", kind="count")
    alignment = 32
    for _ in range(n_kv):
        key = w.string("metadata")
        vtype = w.u32("metadata")
        value_at = w.pos
        w.value(vtype, "metadata", ())
        if key == "general.alignment":
            alignment = struct.unpack_from("<I", data, value_at)[0]
    meta_end = w.pos
    raw = []
    for _ in range(n_tensors):
        name = w.string("tensor")
        n_dims = w.u32("tensor", kind="count")
        shape = [struct.unpack_from("<q", data, w.leaf(8, "tensor", kind="dim"))[0] for _ in range(n_dims)]
        ggml_type = w.u32("tensor")
        offset_at = w.pos
        rel = w.u64("tensor", kind="offset")
        block_size, block_bytes = GGML_QUANT_SIZES[T(ggml_type)]
        nbytes = int(np.prod(shape)) // block_size * block_bytes
        raw.append((name, offset_at, rel, nbytes))
    header_end = w.pos
    data_offset = -(-header_end // alignment) * alignment
    offsets = tuple((name, at, data_offset + rel + nbytes) for name, at, rel, nbytes in raw)
    return HeaderMap(tuple(w.leaves), header_end, n_tensors, n_kv, meta_end, offsets, data_offset)


def acceptable_cut_offsets(m: HeaderMap, cut: int) -> tuple[set[int], str]:
    """Offsets a parser may blame for a file cut to ``cut`` bytes inside its header, and the section.

    The field that straddles the cut (or starts exactly at it), any count or length that already
    promises bytes past the cut, and the two header counts when they cannot fit in what is left.
    """
    leaf = m.leaves[bisect.bisect_right(m.leaf_ends, cut)]
    ok = {leaf.start} | {at for at, promised in leaf.guards if promised > cut}
    if cut >= 24 and m.n_tensors * MIN_TENSOR_INFO > cut - 24:
        ok.add(8)
    if cut >= m.meta_end and m.n_tensors * MIN_TENSOR_INFO > cut - m.meta_end:
        ok.add(8)
    if cut >= 24 and m.n_kv * MIN_KV > cut - 24:
        ok.add(16)
    return ok, leaf.section


# --- the CLI ------------------------------------------------------------------------------------

def run_cli(args: Sequence[str]) -> Result:
    """Invoke the CLI in-process; exceptions are caught by CliRunner and show up as result.exception."""
    return CliRunner().invoke(main, [str(a) for a in args])


def assert_one_line_error(result: Result, *needles: str) -> str:
    """Exit 2, no traceback, exactly one line on stderr starting 'ggaudit: error:', holding each needle."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.stderr, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("ggaudit: error: "), lines[0]
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@contextlib.contextmanager
def tmpfs_copy(source: Path) -> Iterator[Path]:
    """A copy of ``source`` on a tmpfs (/dev/shm), in a folder of its own removed afterwards; skips the test
    where there is no /dev/shm."""
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no /dev/shm tmpfs here")
    folder = Path(tempfile.mkdtemp(prefix="ggaudit-test-", dir=shm))
    try:
        copy = folder / source.name
        shutil.copyfile(source, copy)
        yield copy
    finally:
        shutil.rmtree(folder)
