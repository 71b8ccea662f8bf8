"""A bounded fuzz run (issue 6): header parser (plus info and scan on what it accepts) and the manifest
and checksum-file parsers. Any outcome other than success or FormatError/ManifestError fails.

Each target runs batches of hypothesis examples until its time budget is spent (about 40 s in all;
``GGAUDIT_FUZZ_SECONDS`` scales it, e.g. 0.2 for a quick run or 10 for a long one). Longer runs, and
coverage-guided ones with atheris, are in scripts/fuzz_header.py and scripts/fuzz_manifests.py.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from ggaudit.errors import FormatError
from ggaudit.verify.stores.sums import SumsEntry

from reliability_support import load_script

SCALE = float(os.environ.get("GGAUDIT_FUZZ_SECONDS", "1"))
BATCH = 100


fuzz_header = load_script("fuzz_header")
fuzz_manifests = load_script("fuzz_manifests")


def _run_for(seconds: float, make_batch) -> int:
    """Run hypothesis batches (fresh random examples each) until ``seconds`` have passed."""
    deadline = time.monotonic() + seconds
    batches = 0
    while True:
        make_batch()()
        batches += 1
        if time.monotonic() >= deadline:
            return batches * BATCH


def test_fuzz_header_parser_info_and_scan(tmp_path: Path) -> None:
    seeds = fuzz_header.seed_corpus()
    assert len(seeds) >= 5
    target = fuzz_header.Target(tmp_path)
    # The harness is sound: the whole models built for the corpus (its last two seeds) are accepted;
    # header-only cuts of big fixtures and lone split shards are rejected.
    outcomes = [target(seed) for seed in seeds]
    assert outcomes[-2:] == ["accepted", "accepted"], outcomes
    examples = _run_for(24 * SCALE, lambda: fuzz_header.hypothesis_test(target, seeds, BATCH))
    assert examples >= BATCH


def test_fuzz_harness_reports_non_format_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash in the parser is reported as a bug, a FormatError is not (the harness can fail)."""
    target = fuzz_header.Target(tmp_path)
    assert target(b"GGUF\x03\x00") == "rejected"

    def broken(path: str) -> None:
        raise IndexError("boom")

    monkeypatch.setattr(fuzz_header, "open_model", broken)
    with pytest.raises(fuzz_header.Bug, match="IndexError: boom"):
        target(b"GGUF")

    def untold(path: str) -> None:
        raise FormatError(path, "no location")

    monkeypatch.setattr(fuzz_header, "open_model", untold)
    with pytest.raises(fuzz_header.Bug, match="without a location"):
        target(b"GGUF")


@pytest.mark.parametrize("target", ["sums", "tensor", "ollama", "names", "capture", "ids"])
def test_fuzz_manifest_parsers(target: str, tmp_path: Path) -> None:
    targets = fuzz_manifests.Targets(tmp_path)
    for seed in fuzz_manifests.SEEDS[target]():
        assert targets.run(target, seed) in ("accepted", "rejected", "checked")
    budget = {"sums": 3.0, "tensor": 2.5, "ollama": 2.5, "names": 1.0, "capture": 1.5, "ids": 0.5}[target] * SCALE
    examples = _run_for(budget, lambda: fuzz_manifests.hypothesis_test(targets, target, BATCH))
    assert examples >= BATCH


def test_fuzz_manifest_invariants_catch_an_escape(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """If read_sums ever let a name out of its folder, the harness would say so."""
    targets = fuzz_manifests.Targets(tmp_path)
    outside = SumsEntry("x", tmp_path.parent / "x", "0" * 64, 1)
    monkeypatch.setattr(fuzz_manifests, "read_sums", lambda path: (outside,))
    with pytest.raises(fuzz_manifests.Bug, match="outside the folder"):
        targets.run("sums", b"")


# --- regressions the fuzzer found -------------------------------------------------------------------

def test_signalling_nans_are_found_without_a_warning_on_stderr(tmp_path: Path) -> None:
    """Widening a signalling NaN raised FE_INVALID: numpy printed a RuntimeWarning to stderr."""
    import warnings

    import numpy as np
    from gguf import GGMLQuantizationType as T

    from ggaudit.format.build import TensorSpec, write_gguf
    from ggaudit.scan.run import scan

    from reliability_support import run_cli, tensor_payload

    f32 = np.zeros(8, "<u4")
    f32[3] = 0x7F800001                       # signalling NaN
    f16 = np.zeros(8, "<u2")
    f16[5] = 0x7C01
    q8 = bytearray(tensor_payload(T.Q8_0, (32, 2), seed=4))
    q8[34:36] = (0x7C01).to_bytes(2, "little")   # row 1's d
    path = tmp_path / "snan.gguf"
    write_gguf(path, [TensorSpec("f32", T.F32, (8,), f32.tobytes()), TensorSpec("f16", T.F16, (8,), f16.tobytes()),
                      TensorSpec("q8", T.Q8_0, (32, 2), bytes(q8))])
    for deep in (False, True):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            report = scan(path, workers=0, deep=deep)
        found = {t.name: [(f.kind, f.row, f.column) for f in t.findings] for t in report.tensors}
        assert found["f32"] == [("nan", 0, 3)] and found["f16"] == [("nan", 0, 5)]
        assert found["q8"][0][:2] == ("nan", 1)
    result = run_cli(["scan", path])
    assert result.exit_code == 1 and result.stderr == ""
