#!/usr/bin/env python3
"""Check ggaudit on real GGUF files written by other tools: the header parses exactly as gguf.GGUFReader
reads it (version, alignment, data offset; every tensor's name, type, shape, offset and size; every
metadata key in order with its type and value, arrays by element type, count and first elements), its
metadata agrees with its tensors and its chat templates are safe (no finding: a real file's would be a
false alarm), the scan runs to a verdict, and a tensor manifest written and then verified finds nothing.
A vocabulary-only file (no tensors) gets the header, metadata and template checks.

    python scripts/check_real_gguf.py FILE...
    python scripts/check_real_gguf.py --llama-cpp-python 0.3.16

--llama-cpp-python fetches that release's source archive with pip (registry access only) and checks the
tokenizer GGUFs llama.cpp keeps under models/ (17 files in 0.3.16, written by llama.cpp's converter).
Prints a line per file; exit status 1 if any file disagrees.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import gguf
from gguf import GGUFValueType as V

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ggaudit.errors import GGAuditError
from ggaudit.format.consistency import check_metadata
from ggaudit.format.templates import check_templates
from ggaudit.format.layout import GGUFFile, open_gguf, open_model
from ggaudit.verify.manifests.tensor import build_tensor_manifest, write_tensor_manifest
from ggaudit.scan.report import describe_metadata, describe_template
from ggaudit.scan.run import scan
from ggaudit.verify.walk.tensors import verify_tensor_manifest


def header_differences(ours: GGUFFile, ref: Any) -> list[str]:
    """Where ggaudit's parse of a file differs from a gguf.GGUFReader of the same file (empty: none)."""
    out: list[str] = []
    mine = (ours.version, ours.alignment, ours.data_offset)
    theirs = (ref.fields["GGUF.version"].contents(), ref.alignment, ref.data_offset)
    if mine != theirs:
        out.append(f"(version, alignment, data offset): {mine} != {theirs}")
    if len(ours.tensors) != len(ref.tensors):
        out.append(f"tensor count: {len(ours.tensors)} != {len(ref.tensors)}")
    for t, r in zip(ours.tensors, ref.tensors, strict=False):
        want = (r.name, r.tensor_type, tuple(int(n) for n in r.shape), int(r.data_offset), int(r.n_bytes))
        if (t.name, t.ggml_type, t.shape, t.offset, t.nbytes) != want:
            out.append(f"tensor {t.name!r}: {(t.name, t.ggml_type, t.shape, t.offset, t.nbytes)} != {want}")
    ref_meta = {k: f for k, f in ref.fields.items() if not k.startswith("GGUF.")}
    if list(ours.metadata) != list(ref_meta):
        out.append(f"metadata keys: {list(ours.metadata)} != {list(ref_meta)}")
    for key, fld in ref_meta.items():
        if key in ours.metadata:
            out += _value_differences(key, ours.metadata[key], fld)
    return out


def _value_differences(key: str, mine: Any, fld: Any) -> list[str]:
    if mine.type != fld.types[0]:
        return [f"{key}: type {mine.type.name} != {fld.types[0].name}"]
    if fld.types[0] is not V.ARRAY:
        return [] if mine.value == fld.contents() else [f"{key}: {mine.value!r} != {fld.contents()!r}"]
    got = (mine.value.elem_type, mine.value.count)
    if got != (fld.types[-1], len(fld.data)):
        return [f"{key}: array {got} != {(fld.types[-1], len(fld.data))}"]
    head = [fld.contents(i) for i in range(len(mine.value.head))]
    return [] if list(mine.value.head) == head else [f"{key}: first elements {mine.value.head!r} != {head!r}"]


def check(path: Path) -> tuple[list[str], str]:
    """Every difference and failure for one file, and the scan's verdict (non-finite values in a real
    model are a finding, not a disagreement)."""
    try:
        problems = header_differences(open_gguf(path), gguf.GGUFReader(path))
        model = open_model(path)
        # A real file's header agrees with its tensors and its templates are safe: a finding is a false alarm.
        problems += [f"metadata: {describe_metadata(m)}" for m in check_metadata(model)]
        problems += [f"template: {describe_template(t)}" for t in check_templates(model)]
        if not model.tensors:
            return problems, "vocabulary only: header, metadata and templates checked"
        verdict = scan(str(path))
        # A real file's bytes outside its tensors are zero padding: anything else is a finding to look at.
        problems += [f"structure {s.kind} at offset {s.offset}, length {s.length}: expected {s.expected}, got "
                     f"{s.actual}" for s in verdict.structure]
        with tempfile.TemporaryDirectory() as tmp:
            manifest = Path(tmp) / "m.json"
            write_tensor_manifest(build_tensor_manifest(open_model(path)), manifest)
            problems += [f"verify --manifest: {m}" for m in verify_tensor_manifest(path, manifest).mismatches]
    except GGAuditError as err:
        return [f"ggaudit: {err}"], "not scanned"
    counts = ", ".join(f"{n} {kind}" for kind, n in verdict.counts.items() if n)
    return problems, f"{len(verdict.tensors)} tensors scanned: {counts or 'all finite'}"


def llama_cpp_models(version: str, into: Path) -> list[Path]:
    subprocess.run([sys.executable, "-m", "pip", "download", f"llama-cpp-python=={version}", "--no-deps",
                    "--no-binary", ":all:", "-q", "-d", str(into)], check=True)
    archive = next(into.glob("llama_cpp_python-*.tar.gz"))
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.isfile() and m.name.endswith(".gguf")
                   and "/vendor/llama.cpp/models/" in m.name]
        # The "data" filter (no links or paths out of *into*) exists from Python 3.10.12 and 3.11.4 on.
        tar.extractall(into, members=members, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    return sorted(into.joinpath(m.name) for m in members)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--llama-cpp-python", metavar="VERSION", help="check the GGUFs in this release's sdist")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        files = list(args.files)
        if args.llama_cpp_python:
            files += llama_cpp_models(args.llama_cpp_python, Path(tmp))
        if not files:
            ap.error("no files: give FILEs or --llama-cpp-python VERSION")
        failed = 0
        for path in files:
            problems, verdict = check(path)
            failed += bool(problems)
            print(f"{'DIFFERS' if problems else 'ok':7s} {path.name} ({verdict})")
            for p in problems[:10]:
                print(f"        {p}")
        print(f"{len(files) - failed} of {len(files)} files agree")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
