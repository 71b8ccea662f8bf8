"""Fuzz ggaudit's GGUF header parser, and what runs on a file it accepts (info, scan).

The target feeds bytes to ``open_model`` through a real file; when the header is accepted it renders
``info`` (text and JSON) and scans the model (fast or deep), rendering that report too. The only
acceptable outcomes are a clean run or ``FormatError``: anything else (another exception, a value
that does not serialise, terminal control bytes in text output) is a bug.

Two engines:

* hypothesis (always available with the ``[test]`` extra): structured mutations of a seed corpus
  built from ``fixtures/`` and from models made here (field-aware overwrites of counts and lengths
  with boundary values, byte flips, cuts, splices)::

      python scripts/fuzz_header.py --examples 20000

* atheris (coverage-guided libFuzzer; ``pip install atheris``), seeded from the same corpus::

      python scripts/fuzz_header.py --atheris -- -max_total_time=3600

The test suite runs a bounded hypothesis pass (tests/test_fuzz.py).
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
import tempfile
import warnings
from pathlib import Path
from collections.abc import Callable, Sequence

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ggaudit.errors import FormatError
from ggaudit.format.info import model_to_json
from ggaudit.model_info import ModelInfo
from ggaudit.format.layout import Model, open_model

#: Values that break naive count and length handling.
INTERESTING = (0, 1, 2, 3, 4, 7, 8, 31, 32, 33, 64, 255, 256, 4095, 4096, 65535, 65536, (1 << 31) - 1,
               1 << 31, (1 << 32) - 1, 1 << 32, 1 << 40, (1 << 63) - 1, 1 << 63, (1 << 64) - 1)
#: How much tensor data a seed keeps after its data section starts (enough for a few small tensors).
SEED_DATA_BYTES = 4096
#: Seeds up to this size are used whole.
SMALL_SEED = 64 << 10


class Bug(AssertionError):
    """The target did something other than succeed or raise FormatError."""


def _header_end(data: bytes) -> int:
    """Where the data section of a well-formed seed starts (or the whole length if unknown)."""
    try:
        from tests.support import walk_header
    except ImportError:  # pragma: no cover - run from elsewhere
        return len(data)
    return walk_header(data).data_offset


def field_starts(data: bytes) -> list[int]:
    """Offsets where header fields start in a well-formed seed: the best places to overwrite."""
    try:
        from tests.support import walk_header
    except ImportError:  # pragma: no cover
        return list(range(0, min(len(data), 256), 4))
    return sorted({leaf.start for leaf in walk_header(data).leaves})


def seed_corpus(extra_dir: Path | None = None) -> list[bytes]:
    """Headers (plus a little data) of every fixture, and small whole models built here."""
    from tests import support as rs

    seeds: list[bytes] = []
    for path in rs.fixture_files():
        # Small files whole (they open and scan); big ones cut after their header, so each run
        # stays cheap (those are rejected unmutated: their tensor data runs past the end).
        data = path.read_bytes()
        seeds.append(data if len(data) <= SMALL_SEED else data[:_header_end(data) + SEED_DATA_BYTES])
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        rs.write_small_model(folder / "small.gguf", rows=4)
        rs.write_rich_model(folder / "rich.gguf")
        for path in sorted(folder.glob("*.gguf")):
            data = path.read_bytes()
            seeds.append(data if len(data) <= SMALL_SEED else data[:_header_end(data) + SEED_DATA_BYTES])
    if extra_dir is not None:
        seeds.extend(p.read_bytes() for p in sorted(extra_dir.iterdir()) if p.is_file())
    return seeds


def _no_controls(lines: Sequence[str], where: str) -> None:
    for line in lines:
        if any(ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0 for ch in line):
            raise Bug(f"{where}: control character reached text output: {line!r}")


def _exercise(path: str, deep: bool) -> None:
    model = open_model(path)
    _no_controls(ModelInfo(model=model).summary().lines, "info")
    json.dumps(model_to_json(model), allow_nan=False)
    try:
        from ggaudit.scan.run import scan
    except ImportError:
        return
    report = scan(model, deep=deep, workers=0, limit=4)
    _no_controls(report.summary().lines, "scan")
    json.dumps(report.to_json(), allow_nan=False)
    _round_trips(path, model)


def _round_trips(path: str, model: Model) -> None:
    """Invariants on an accepted file: it equals itself, and verifies against its own manifest."""
    from ggaudit.verify.diff import diff_models
    from ggaudit.verify.manifests.tensor import build_tensor_manifest, write_tensor_manifest
    from ggaudit.verify.walk.tensors import verify_tensor_manifest

    if not diff_models(model, model).ok:
        raise Bug("diff of a file with itself found differences")
    manifest = path + ".manifest.json"
    write_tensor_manifest(build_tensor_manifest(model), manifest, replace=True)
    verified = verify_tensor_manifest(path, manifest)
    # Structure findings (non-zero padding, a gap) are facts about the file, as scan reports them; any
    # other mismatch against the file's own manifest is a bug.
    changed = [m for m in verified.mismatches if m.kind != "structure"]
    if changed:
        raise Bug(f"a file does not verify against its own manifest: {changed[:2]}")


class Target:
    """Writes each input to one scratch file and runs the checks on it."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.path = os.path.join(os.fspath(folder), "fuzz.gguf")

    def __call__(self, data: bytes, deep: bool = False) -> str:
        with open(self.path, "wb") as f:
            f.write(data)
        try:
            with warnings.catch_warnings():
                # A warning would be stray output on stderr (numpy's on odd float bits, say): a bug.
                warnings.simplefilter("error")
                _exercise(self.path, deep)
        except FormatError as err:
            if err.path is None or (err.offset is None and err.field is None):
                raise Bug(f"FormatError without a location: {err}") from err
            return "rejected"
        except Exception as err:
            raise Bug(f"{type(err).__name__}: {err}") from err
        return "accepted"


def mutate(data: bytes, ops: Sequence[tuple[str, int, int]], starts: Sequence[int]) -> bytes:
    """Apply (kind, position, value) mutations; positions wrap to the data and field starts."""
    buf = bytearray(data)
    for kind, pos, value in ops:
        if not buf:
            buf = bytearray(b"GGUF")
        at = pos % len(buf)
        if kind in ("u32", "u64") and starts:
            at = starts[pos % len(starts)]
        if kind == "u32":
            buf[at:at + 4] = struct.pack("<I", INTERESTING[value % len(INTERESTING)] & 0xFFFFFFFF)
        elif kind == "u64":
            buf[at:at + 8] = struct.pack("<Q", INTERESTING[value % len(INTERESTING)])
        elif kind == "flip":
            buf[at] ^= 1 << (value % 8)
        elif kind == "byte":
            buf[at] = value & 0xFF
        elif kind == "cut":
            del buf[at:]
        elif kind == "delete":
            del buf[at:at + 1 + value % 16]
        elif kind == "insert":
            buf[at:at] = bytes([value & 0xFF]) * (1 + value % 16)
        elif kind == "dup":
            span = buf[at:at + 1 + value % 64]
            buf[at:at] = span
    return bytes(buf)


OPS = ("u32", "u64", "flip", "byte", "cut", "delete", "insert", "dup")


def hypothesis_test(target: Target, seeds: Sequence[bytes], examples: int,
                    seed: int | None = None) -> Callable[[], None]:
    """A hypothesis test function running ``examples`` mutated seeds through ``target``."""
    from hypothesis import HealthCheck, given, settings, strategies as st

    starts = [field_starts(s) for s in seeds]
    op = st.tuples(st.sampled_from(OPS), st.integers(0, 1 << 20), st.integers(0, 1 << 16))

    @settings(max_examples=examples, deadline=None, database=None, derandomize=seed is not None,
              suppress_health_check=list(HealthCheck))
    @given(index=st.integers(0, len(seeds) - 1), ops=st.lists(op, min_size=1, max_size=4),
           deep=st.booleans())
    def run(index: int, ops: list[tuple[str, int, int]], deep: bool) -> None:
        target(mutate(seeds[index], ops, starts[index]), deep=deep)

    return run


def _atheris_main(target: Target, seeds: Sequence[bytes], argv: list[str]) -> None:
    import atheris

    corpus = tempfile.mkdtemp(prefix="ggaudit-fuzz-corpus-")
    for i, data in enumerate(seeds):
        Path(corpus, f"seed-{i:03d}").write_bytes(data)

    def one_input(data: bytes) -> None:
        target(data, deep=len(data) % 2 == 1)

    atheris.instrument_all()
    atheris.Setup([sys.argv[0], *argv, corpus], one_input)
    atheris.Fuzz()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=5000, help="hypothesis examples to run")
    parser.add_argument("--atheris", action="store_true", help="coverage-guided run with atheris")
    parser.add_argument("--corpus", type=Path, help="extra seed files (e.g. real model headers)")
    parser.add_argument("rest", nargs="*", help="after --: arguments for libFuzzer")
    args = parser.parse_args(argv)
    seeds = seed_corpus(args.corpus)
    with tempfile.TemporaryDirectory(prefix="ggaudit-fuzz-") as tmp:
        target = Target(tmp)
        if args.atheris:
            _atheris_main(target, seeds, args.rest)
            return 0
        hypothesis_test(target, seeds, args.examples)()
    print(f"fuzz_header: {args.examples} examples over {len(seeds)} seeds, no bugs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
