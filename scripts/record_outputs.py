"""Record what every command prints, in every format, on one set of inputs, and compare two recordings.

A refactoring that must not change an output runs this before and after:

    python scripts/record_outputs.py --inputs /tmp/rec-inputs --out /tmp/outputs-before   # old code
    python scripts/record_outputs.py --inputs /tmp/rec-inputs --out /tmp/outputs-after    # new code
    python scripts/record_outputs.py --compare /tmp/outputs-before /tmp/outputs-after

The inputs (fixtures, an Ollama store, a Hugging Face cache snapshot and ``--local-dir`` folder, LM Studio's
and GPT4All's folders, a checksum file, a manifest) are written once into ``--inputs`` and reused, so paths
in the outputs are the same in both recordings. ``--src DIR``: run the ggaudit of that checkout (default:
this one). What varies from run to run is masked: durations (JSON ``seconds``, JUnit ``time``, ``N.NNN s``
in text and HTML) and the run's own temporary paths.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
FORMATS = ("text", "json", "sarif", "junit", "html")
COMMIT = "a" * 40


def _support() -> None:
    sys.path[:0] = [str(HERE.parent / "tests"), str(HERE)]


def _write_inputs(src: Path, root: Path) -> None:
    """Every input the recorded commands read; written only when ``root`` holds none yet."""
    _support()
    import make_fixtures
    from stores_support import gguf, gpt4all_folder, hf_local_dir, lmstudio_models, ollama_everything

    fixtures = root / "fixtures"
    make_fixtures.build_all(fixtures)
    ollama_everything(root / "ollama")
    hf_local_dir(root / "hf-local")
    lmstudio_models(root / "lmstudio")
    gpt4all_folder(root / "gpt4all")
    _hf_cache(root / "hf", gguf(40))
    clean = fixtures / "all_types.gguf"
    digest = hashlib.sha256(clean.read_bytes()).hexdigest()
    (root / "SHA256SUMS").write_text(f"{digest}  fixtures/all_types.gguf\n{'0' * 64}  fixtures/ple_iq4_nl.gguf\n"
                                     f"{'1' * 64}  fixtures/absent.gguf\n")
    _ggaudit(src, ["manifest", str(clean), "-o", str(root / "all_types.manifest.json")], root)
    (root / "digest").write_text(digest)


def _hf_cache(cache: Path, data: bytes) -> None:
    """models--org--tiny at COMMIT (refs/main) holding gguf/tiny.gguf, a link to its blob."""
    repo = cache / "models--org--tiny"
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT + "\n")
    name = hashlib.sha256(data).hexdigest()
    (repo / "blobs" / name).write_bytes(data)
    (repo / "snapshots" / COMMIT / "gguf").mkdir(parents=True)
    (repo / "snapshots" / COMMIT / "gguf" / "tiny.gguf").symlink_to(f"../../../blobs/{name}")


def _commands(root: Path) -> dict[str, list[str]]:
    """Each recorded command by its name; each is run once per format."""
    fx = root / "fixtures"
    clean, faulty = str(fx / "all_types.gguf"), _first_faulty(fx)
    ple = str(fx / "ple_iq4_nl.gguf")
    digest = (root / "digest").read_text()
    manifest = str(root / "all_types.manifest.json")
    return {
        "info": ["info", clean],
        "scan-clean": ["scan", clean],
        "scan-faulty": ["scan", faulty],
        "scan-split": ["scan", *sorted(str(p) for p in fx.glob("split-*.gguf"))[:1]],
        "scan-many": ["scan", clean, faulty, str(fx / "absent.gguf")],
        "verify-sha256": ["verify", clean, "--sha256", digest],
        "verify-sha256-wrong": ["verify", faulty, "--sha256", digest],
        "verify-sums": ["verify", "--sums", str(root / "SHA256SUMS")],
        "verify-manifest": ["verify", clean, "--manifest", manifest],
        "verify-manifest-faulty": ["verify", faulty, "--manifest", manifest],
        "verify-ollama-chat": ["verify", "ollama:chat", "--store", str(root / "ollama")],
        "verify-ollama-imagegen": ["verify", "ollama:imagegen", "--store", str(root / "ollama")],
        "verify-ollama-all": ["verify", "ollama:*", "--store", str(root / "ollama")],
        "verify-hf": ["verify", "hf:org/tiny"],
        "verify-hf-local": ["verify", f"hf-local:{root / 'hf-local'}"],
        "verify-lmstudio": ["verify", "lmstudio:", "--store", str(root / "lmstudio")],
        "verify-gpt4all": ["verify", "gpt4all:", "--store", str(root / "gpt4all")],
        "rows-ple": ["rows", ple, "--ids", "0-40,1000", "--page-crossing"],
        "rows-faulty": ["rows", _faulty_ple(fx), "--ids", "0-1023", "--sha256", _digest(ple)],
        "check-clean": ["check", clean],
        "check-clean-sha256": ["check", clean, "--sha256", digest],
        "check-faulty-sha256": ["check", faulty, "--sha256", digest],
        "check-faulty-manifest": ["check", faulty, "--manifest", manifest],
        "check-ollama": ["check", "ollama:chat", "--store", str(root / "ollama")],
        "check-hf": ["check", "hf:org/tiny"],
        "diff": ["diff", clean, faulty],
        "manifest-stdout": ["manifest", clean, "-o", "-"],
    }


def _first_faulty(fx: Path) -> str:
    return str(sorted(p for p in fx.glob("*.gguf") if "nan" in p.name or "inf" in p.name)[0])


def _faulty_ple(fx: Path) -> str:
    found = sorted(p for p in fx.glob("ple*.gguf") if p.name != "ple_iq4_nl.gguf")
    return str(found[0] if found else fx / "ple_iq4_nl.gguf")


def _digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _ggaudit(src: Path, args: Sequence[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(src), NO_COLOR="1", COLUMNS="120",
               XDG_CACHE_HOME=str(cwd / ".cache-home"), LOCALAPPDATA=str(cwd / ".cache-home"),
               HF_HUB_CACHE=str(cwd / "hf"))
    return subprocess.run([sys.executable, "-m", "ggaudit", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=300)


_MASKS = ((re.compile(r'"seconds": [0-9.e-]+'), '"seconds": 0'),
          (re.compile(r'time="[0-9.]+"'), 'time="0"'),
          (re.compile(r"\b\d+\.\d{3} s\b"), "N s"),
          (re.compile(r'<td class="num">\d+\.\d{3}</td>'), '<td class="num">N</td>'),
          (re.compile(r'"(elapsed|duration)[a-z_]*": [0-9.e-]+'), r'"\1": 0'))


def _masked(text: str) -> str:
    for pattern, replacement in _MASKS:
        text = pattern.sub(replacement, text)
    return text


def record(src: Path, inputs: Path, out: Path) -> int:
    if not (inputs / "digest").exists():
        inputs.mkdir(parents=True, exist_ok=True)
        _write_inputs(src, inputs)
    out.mkdir(parents=True, exist_ok=True)
    for name, args in _commands(inputs).items():
        for fmt in FORMATS:
            done = _ggaudit(src, [*args, "--format", fmt] if fmt != "text" else args, inputs)
            text = f"exit {done.returncode}\n--- stdout\n{done.stdout}--- stderr\n{done.stderr}"
            (out / f"{name}.{fmt}").write_text(_masked(text))
    print(f"{len(_commands(inputs)) * len(FORMATS)} outputs recorded in {out}")
    return 0


def compare(before: Path, after: Path) -> int:
    names = sorted({p.name for p in before.iterdir()} | {p.name for p in after.iterdir()})
    differ = 0
    for name in names:
        a, b = before / name, after / name
        if not a.exists() or not b.exists():
            print(f"{name}: only in {'after' if a.exists() is False else 'before'}")
            differ += 1
            continue
        old, new = _masked(a.read_text()), _masked(b.read_text())
        if old != new:
            differ += 1
            diff = difflib.unified_diff(old.splitlines(), new.splitlines(), "before", "after", lineterm="", n=1)
            print(f"{name}: differs\n" + "\n".join(list(diff)[:40]))
    print(f"{len(names)} outputs compared, {differ} differ")
    return 1 if differ else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--src", type=Path, default=HERE.parent, help="checkout whose ggaudit runs")
    parser.add_argument("--inputs", type=Path, default=Path("/tmp/rec-inputs"))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--compare", type=Path, nargs=2, metavar=("BEFORE", "AFTER"))
    a = parser.parse_args(argv)
    if a.compare:
        return compare(*a.compare)
    if a.out is None:
        parser.error("give --out DIR or --compare BEFORE AFTER")
    return record(a.src.resolve(), a.inputs.resolve(), a.out)


if __name__ == "__main__":
    sys.exit(main())
