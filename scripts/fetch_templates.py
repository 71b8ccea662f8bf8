"""Fetch the real chat templates the template checks are tested against (tests/test_template_corpus.py).

Downloads the sdists of llama-cpp-python and vLLM (pinned below) into bench-data/templates/ (git-ignored;
skipped when already there) and writes every chat template they ship into bench-data/templates/corpus/ as
``<source>-<name>.jinja``: llama.cpp's ``models/templates/*.jinja``, vLLM's ``*.jinja`` files (its examples and
its template folders), and the ``tokenizer.chat_template*`` values of llama.cpp's ``models/ggml-vocab-*.gguf``,
which are kept too (in ``vocab/``, under their path in the sdist): tests/test_template_corpus.py scans them.

``pip download --no-binary :all:`` prepares an sdist's metadata, which for vLLM means installing torch to build
it; when pip leaves no archive, the sdist is taken from PyPI's simple index (PEP 691 JSON) and its sha256
checked against the index's. Nothing from an archive is written outside the folder: members are read as
bytes (never extracted by name), and the ``.gguf`` files go through tarfile's ``data`` filter.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tarfile
import urllib.request
from pathlib import Path

from ggaudit.format.layout import open_model
from ggaudit.format.templates import template_keys

ROOT = Path(__file__).resolve().parent.parent / "bench-data" / "templates"
#: (source prefix of the corpus names, PyPI name, pinned version, sdist file name)
SDISTS = (("llama.cpp", "llama-cpp-python", "0.3.36", "llama_cpp_python-0.3.36.tar.gz"),
          ("vllm", "vllm", "0.33.0", "vllm-0.33.0.tar.gz"))
SIMPLE_INDEX = "https://pypi.org/simple/{name}/"


def download(name: str, version: str, filename: str, into: Path) -> Path:
    """The sdist at ``into/filename``: already there, else by pip, else from the simple index."""
    archive = into / filename
    if not archive.exists():
        pip = subprocess.run([sys.executable, "-m", "pip", "download", f"{name}=={version}", "--no-deps",
                              "--no-binary", ":all:", "-q", "-d", str(into)], check=False, capture_output=True,
                             text=True)
        if not archive.exists():
            last = pip.stderr.strip().splitlines()[-1:] or ["no archive"]
            print(f"pip download {name}=={version}: {last[0]}; taking {filename} from the index", file=sys.stderr)
            _download_from_index(name, filename, archive)
    return archive


def _download_from_index(name: str, filename: str, archive: Path) -> None:
    request = urllib.request.Request(SIMPLE_INDEX.format(name=name),
                                     headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        files = json.load(response)["files"]
    [entry] = [f for f in files if f["filename"] == filename]
    with urllib.request.urlopen(entry["url"], timeout=600) as response:
        data = response.read()
    if hashlib.sha256(data).hexdigest() != entry["hashes"]["sha256"]:
        raise SystemExit(f"{filename}: sha256 differs from the index's")
    partial = archive.with_suffix(".part")
    partial.write_bytes(data)
    partial.replace(archive)


def _is_template(member: str, source: str) -> bool:
    if not member.endswith(".jinja"):
        return False
    return "/vendor/llama.cpp/models/templates/" in member if source == "llama.cpp" else True


def _corpus_name(source: str, member: str) -> str:
    """``<source>-<name>.jinja``: the file's name, after the folders below the sdist's own (those of
    ``examples/`` and llama.cpp's ``models/templates/`` left out), so two folders' files do not collide."""
    parts = Path(member).with_suffix("").parts[1:]
    for top in (("vendor", "llama.cpp", "models", "templates"), ("examples",)):
        if parts[:len(top)] == top:
            parts = parts[len(top):]
    return f"{source}-{'-'.join(parts)}.jinja"


def jinja_templates(source: str, archive: Path) -> dict[str, str]:
    """Corpus name → text of every template file in the archive (read, not extracted); a copy of one already
    read (vLLM's Rust tests copy its examples) is left out."""
    found: dict[str, str] = {}
    with tarfile.open(archive) as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            stream = tar.extractfile(member) if member.isfile() and _is_template(member.name, source) else None
            text = stream.read().decode("utf-8") if stream is not None else None
            if text is not None and text not in found.values():
                found[_corpus_name(source, member.name)] = text
    return found


def _stays_inside(name: str) -> bool:
    path = Path(name)
    return not path.is_absolute() and ".." not in path.parts


def vocab_files(archive: Path, into: Path) -> list[Path]:
    """llama.cpp's ggml-vocab-*.gguf files (vocabulary-only: no tensor), extracted into ``into``."""
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.isfile() and "/vendor/llama.cpp/models/ggml-vocab-" in m.name
                   and m.name.endswith(".gguf") and _stays_inside(m.name)]
        # The "data" filter (no links or paths out of into) exists from Python 3.10.12 and 3.11.4 on; before,
        # the names were checked above (regular files only: no links).
        tar.extractall(into, members=members, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    return sorted(Path(into, m.name) for m in members)


def vocab_templates(files: list[Path]) -> dict[str, str]:
    """``gguf-<vocab>[.<name>].jinja`` → the chat templates of the vocabulary files."""
    found: dict[str, str] = {}
    for path in files:
        for key, value in template_keys(open_model(path)):
            suffix = key.removeprefix("tokenizer.chat_template").replace(".", "-")
            found[f"gguf-{path.stem}{suffix}.jinja"] = value.value
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--into", type=Path, default=ROOT, help=f"the folder (default {ROOT})")
    args = ap.parse_args()
    corpus = args.into / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    found: dict[str, str] = {}
    for source, name, version, filename in SDISTS:
        archive = download(name, version, filename, args.into)
        found |= jinja_templates(source, archive)
        if source == "llama.cpp":
            found |= vocab_templates(vocab_files(archive, args.into / "vocab"))
    for stale in corpus.glob("*.jinja"):
        stale.unlink()
    for file_name, text in sorted(found.items()):
        corpus.joinpath(file_name).write_text(text, encoding="utf-8")
    print(f"{len(found)} templates in {corpus}; the vocabulary files in {args.into / 'vocab'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
