"""Fuzz ggaudit's manifest and checksum-file parsers.

Targets, each fed through real files in a scratch folder:

* ``sums``: ``manifests.read_sums`` (GNU, BSD ``--tag`` and OpenSSL lines, backslash escapes);
  every accepted entry must resolve inside the checksum file's folder.
* ``tensor``: ``manifests.read_tensor_manifest`` (ggaudit's JSON tensor manifest).
* ``ollama``: ``manifests.read_ollama_manifest`` on a manifest placed in a scratch store; every
  accepted digest must be 64 lowercase hex digits and its blob path must stay in ``blobs/``.
* ``names``: ``parse_ollama_name`` and ``parse_hf_spec`` on arbitrary text; an accepted Ollama name's
  manifest path must stay under ``manifests/``.
* ``capture`` and ``ids``: the CLI's file options, ``ggaudit rows --against CAPTURE`` (random bytes,
  cut and corrupted .npz/.npy) and ``--ids-file``; only exit 0, 1 or 2 with one error line is accepted.

The only acceptable outcomes are success (with the invariants above) or ``ManifestError`` /
``UsageError``. Engines as in ``fuzz_header.py``: hypothesis by default, ``--atheris`` for a
coverage-guided run::

    python scripts/fuzz_manifests.py --examples 20000
    python scripts/fuzz_manifests.py --atheris --target sums -- -max_total_time=3600
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from collections.abc import Callable, Sequence

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ggaudit.verify.manifests.tensor import (MANIFEST_FORMAT, MANIFEST_VERSION, read_tensor_manifest,
                                             tensor_manifest_to_json)
from ggaudit.stores.ollama import MEDIA_MODEL, ollama_blob_path, parse_ollama_name, read_ollama_manifest
from ggaudit.stores.hf import parse_hf_spec
from ggaudit.stores.sums import read_sums
from ggaudit.errors import ManifestError, UsageError
from ggaudit.untrusted import confine

HEX = "0123456789abcdef" * 4
DIGEST = "sha256:" + "ab" * 32
ACCEPTABLE = (ManifestError, UsageError)


class Bug(AssertionError):
    """A parser did something other than succeed (with its invariants) or raise a ManifestError."""


def _inside(path: Path, folder: Path) -> bool:
    return confine(path, (folder,)) is None


def sums_seeds() -> list[bytes]:
    h = "0f" * 32
    return [
        f"{h}  model.gguf\n".encode(),
        f"{h} *model.gguf\n{h.upper()}  sub/other.gguf\n".encode(),
        f"SHA256 (model.gguf) = {h}\n".encode(),
        f"SHA2-256(model.gguf)= {h}\n".encode(),
        f"\\{h}  we\\\\ird\\nname.gguf\n# comment\n\n".encode(),
        f"{h}  ../escape.gguf\n{h}  /etc/passwd\n".encode(),
    ]


def tensor_manifest_seeds() -> list[bytes]:
    doc = {"format": MANIFEST_FORMAT, "version": MANIFEST_VERSION, "created_by": "fuzz",
           "hash": {"file": "sha256", "tensor": "xxh3-128", "row_group": "xxh3-128"},
           "row_group_bytes": 1 << 20,
           "files": [{"name": "m.gguf", "size": 4096, "sha256": "0f" * 32}],
           "tensors": [{"name": "t", "file": "m.gguf", "type": "Q8_0", "shape": [64, 2], "offset": 64,
                        "nbytes": 136, "row_bytes": 68, "n_rows": 2, "rows_per_group": 2,
                        "xxh3_128": "1f" * 16, "row_groups": ["2e" * 16]}]}
    return [json.dumps(doc).encode(), json.dumps(doc, indent=1).encode()]


def ollama_seeds() -> list[bytes]:
    doc = {"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
           "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": DIGEST,
                      "size": 10},
           "layers": [{"mediaType": MEDIA_MODEL, "digest": "sha256:" + "cd" * 32, "size": 4096},
                      {"mediaType": "application/vnd.ollama.image.template", "digest": DIGEST, "size": 5}]}
    evil = dict(doc, layers=[{"mediaType": MEDIA_MODEL, "digest": "sha256:../../etc/passwd", "size": 1}])
    return [json.dumps(doc).encode(), json.dumps(evil).encode()]


def name_seeds() -> list[bytes]:
    return [b"llama3", b"llama3:8b", b"ns/model:tag", b"host.example:5000/ns/model:tag", b"../../x",
            b"ORG/NAME@main", b"ORG/NAME@0123456789abcdef0123456789abcdef01234567"]


class Targets:
    """One scratch folder (a checksum folder and an Ollama store) shared by all inputs."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.root = Path(folder).resolve()
        self.sums_dir = self.root / "sums"
        self.sums_dir.mkdir(exist_ok=True)
        (self.sums_dir / "model.gguf").write_bytes(b"x")
        self.store = self.root / "store"
        self.manifest = parse_ollama_name("fuzz/model:tag").manifest_path(self.store)
        self.manifest.parent.mkdir(parents=True, exist_ok=True)
        (self.store / "blobs").mkdir(exist_ok=True)

    def sums(self, data: bytes) -> str:
        path = self.sums_dir / "SHA256SUMS"
        path.write_bytes(data)
        entries = read_sums(path)
        for e in entries:
            if e.problem is None and not _inside(e.path, self.sums_dir):
                raise Bug(f"sums entry {e.name!r} resolves outside the folder: {e.path}")
            if len(e.sha256) != 64 or e.sha256 != e.sha256.lower():
                raise Bug(f"sums digest not normalised: {e.sha256!r}")
        return "accepted"

    def tensor(self, data: bytes) -> str:
        path = self.root / "manifest.json"
        path.write_bytes(data)
        manifest = read_tensor_manifest(path)
        for f in manifest.files:
            if "/" in f.name or "\\" in f.name or f.name in ("", ".", ".."):
                raise Bug(f"file name {f.name!r} is not a plain name")
        json.dumps(tensor_manifest_to_json(manifest))
        return "accepted"

    def ollama(self, data: bytes) -> str:
        self.manifest.write_bytes(data)
        manifest = read_ollama_manifest("fuzz/model:tag", self.store)
        blobs = self.store / "blobs"
        for layer in manifest.blobs:
            if len(layer.digest) != 64 or any(c not in HEX for c in layer.digest):
                raise Bug(f"digest {layer.digest!r} was not validated")
            if ollama_blob_path(self.store, layer.digest).parent != blobs:
                raise Bug(f"blob path of {layer.digest!r} leaves blobs/")
        return "accepted"

    def names(self, data: bytes) -> str:
        text = data.decode("utf-8", "replace")
        manifests = self.store / "manifests"
        try:
            name = parse_ollama_name(text)
        except UsageError:
            pass
        else:
            if not _inside(name.manifest_path(self.store), manifests):
                raise Bug(f"Ollama name {text!r} leads outside manifests/: {name.manifest_path(self.store)}")
        try:
            spec = parse_hf_spec(text)
        except UsageError:
            pass
        else:
            if not _inside(self.root / spec.folder, self.root) or ".." in spec.revision.split("/"):
                raise Bug(f"HF spec {text!r} leads outside the cache")
        return "checked"

    def _cli(self, args: list[str]) -> str:
        from click.testing import CliRunner

        from ggaudit.cli import main

        result = CliRunner().invoke(main, [*args])
        if result.exit_code not in (0, 1, 2) or (result.exception is not None
                                                  and not isinstance(result.exception, SystemExit)):
            raise Bug(f"{args}: exit {result.exit_code}: {result.exception!r} {result.stderr[-300:]!r}")
        if result.exit_code == 2 and (len(result.stderr.splitlines()) != 1
                                      or not result.stderr.startswith("ggaudit: error: ")):
            raise Bug(f"{args}: not one error line: {result.stderr[:300]!r}")
        return "rejected" if result.exit_code == 2 else "checked"

    def capture(self, data: bytes) -> str:
        """``rows --against``: the bytes as .npz and as .npy (numpy decides by content, not the name)."""
        for suffix in (".npz", ".npy"):
            path = self.root / f"capture{suffix}"
            path.write_bytes(data)
            outcome = self._cli(["rows", self.model(), "--ids", "0-3", "--against", str(path)])
        return outcome

    def ids(self, data: bytes) -> str:
        path = self.root / "ids.txt"
        path.write_bytes(data)
        return self._cli(["rows", self.model(), "--ids-file", str(path), "--modes", "buffered"])

    def model(self) -> str:
        path = self.root / "model.gguf"
        if not path.exists():
            from ggaudit.format.build import TensorSpec, write_gguf
            from gguf import GGMLQuantizationType

            write_gguf(path, [TensorSpec("token_embd.weight", GGMLQuantizationType.F32, (4, 8), bytes(128))],
                       {"general.architecture": "llama"})
        return str(path)

    def run(self, target: str, data: bytes) -> str:
        try:
            return getattr(self, target)(data)
        except ACCEPTABLE as err:
            if err.path is None and target not in ("names", "capture", "ids"):
                raise Bug(f"{type(err).__name__} without a path: {err}") from err
            return "rejected"
        except Bug:
            raise
        except Exception as err:
            raise Bug(f"{target}: {type(err).__name__}: {err}") from err


def capture_seeds() -> list[bytes]:
    """Good captures (a .npz, compressed and not; a structured .npy) of the fuzz model's rows 0..3."""
    import io

    import numpy as np

    ids, rows = np.arange(4, dtype=np.int64), np.zeros((4, 16), dtype=np.uint8)
    seeds = []
    for save in (np.savez, np.savez_compressed):
        buf = io.BytesIO()
        save(buf, ids=ids, rows=rows)
        seeds.append(buf.getvalue())
    structured = np.zeros(4, dtype=[("ids", "<i8"), ("rows", "u1", (16,))])
    structured["ids"] = ids
    buf = io.BytesIO()
    np.save(buf, structured)
    seeds.append(buf.getvalue())
    obj = io.BytesIO()
    np.save(obj, np.array([1, "x"], dtype=object), allow_pickle=True)
    return [*seeds, obj.getvalue(), b"", b"PK\x03\x04"]


def ids_seeds() -> list[bytes]:
    return [b"0,1,2", b"# comment\n3-5\n", b"7\n0-7\n", b"-1", b"99999999999999999999", b"\xff\xfe"]


SEEDS: dict[str, Callable[[], list[bytes]]] = {"sums": sums_seeds, "tensor": tensor_manifest_seeds,
                                               "ollama": ollama_seeds, "names": name_seeds,
                                               "capture": capture_seeds, "ids": ids_seeds}
TOKENS = (b"..", b"/", b"\\", b"\n", b"\r", b"\x00", b"\x1b[2J", b" *", b"  ", b"sha256:", b"(", b")= ",
          b"\"", b"{", b"}", b"[", b"]", b",", b":", b"-1", b"1e309", b"true", b"null", b"\xff", b"\xc3",
          b"0" * 64, b"@", b"%", b"\\n")


def mutate(data: bytes, ops: Sequence[tuple[int, int, int]]) -> bytes:
    """(kind, position, value) mutations: insert a token, delete a span, flip a byte, cut."""
    buf = bytearray(data)
    for kind, pos, value in ops:
        at = pos % (len(buf) + 1)
        if kind == 0:
            buf[at:at] = TOKENS[value % len(TOKENS)]
        elif kind == 1:
            del buf[at:at + 1 + value % 8]
        elif kind == 2 and buf:
            buf[at % len(buf)] ^= 1 << (value % 8)
        elif kind == 3:
            del buf[at:]
        elif kind == 4:
            buf[at:at] = buf[at:at + 1 + value % 32]
    return bytes(buf)


def hypothesis_test(targets: Targets, target: str, examples: int) -> Callable[[], None]:
    from hypothesis import HealthCheck, given, settings, strategies as st

    seeds = SEEDS[target]()
    op = st.tuples(st.integers(0, 4), st.integers(0, 1 << 16), st.integers(0, 255))

    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(index=st.integers(0, len(seeds) - 1), ops=st.lists(op, max_size=6),
           raw=st.one_of(st.none(), st.binary(max_size=256)))
    def run(index: int, ops: list[tuple[int, int, int]], raw: bytes | None) -> None:
        data = raw if raw is not None else mutate(seeds[index], ops)
        targets.run(target, data)

    return run


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", choices=sorted(SEEDS), action="append",
                        help="parser(s) to fuzz (default: all)")
    parser.add_argument("--examples", type=int, default=3000, help="hypothesis examples per target")
    parser.add_argument("--atheris", action="store_true", help="coverage-guided run with atheris")
    parser.add_argument("rest", nargs="*", help="after --: arguments for libFuzzer")
    args = parser.parse_args(argv)
    chosen = args.target or sorted(SEEDS)
    with tempfile.TemporaryDirectory(prefix="ggaudit-fuzz-") as tmp:
        targets = Targets(tmp)
        if args.atheris:
            import atheris

            if len(chosen) != 1:
                parser.error("--atheris fuzzes one --target at a time")
            corpus = tempfile.mkdtemp(prefix="ggaudit-fuzz-corpus-")
            for i, seed in enumerate(SEEDS[chosen[0]]()):
                Path(corpus, f"seed-{i:03d}").write_bytes(seed)
            atheris.instrument_all()
            atheris.Setup([sys.argv[0], *args.rest, corpus], lambda data: targets.run(chosen[0], data))
            atheris.Fuzz()
            return 0
        for target in chosen:
            hypothesis_test(targets, target, args.examples)()
            print(f"fuzz_manifests: {target}: {args.examples} examples, no bugs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
