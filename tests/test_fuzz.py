"""The fuzz pass (issue 6): header parser (plus info and scan on what it accepts) and the manifest and
checksum-file parsers. Any outcome other than success or FormatError/ManifestError fails.

By default each target runs a smoke run: a fixed count of hypothesis examples from a fixed seed, so a
run of the suite checks the same inputs every time (for the same code: hypothesis also draws constants
from ggaudit's own source) in a few seconds. ``GGAUDIT_FUZZ_SECONDS`` turns it into a time-boxed run of
fresh random examples, batch after batch, of about 40 s in all at 1 (the value scales it: 0.2 for a
quick run, 10 for a long one). Longer runs, and coverage-guided ones with atheris, are in
scripts/fuzz_header.py and scripts/fuzz_manifests.py.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from pathlib import Path

import hypothesis
import pytest

from ggaudit.errors import FormatError
from ggaudit.stores.sums import SumsEntry

from support import load_script

#: Unset: the smoke run. Set: the time box's scale.
FUZZ_SECONDS = os.environ.get("GGAUDIT_FUZZ_SECONDS")
SEED = 1206
#: Examples per hypothesis test function in a time-boxed run.
BATCH = 100
#: Per target: examples in the smoke run, and seconds of the time box at GGAUDIT_FUZZ_SECONDS=1.
HEADER_BUDGET = (500, 24.0)
MANIFEST_BUDGETS = {"sums": (300, 3.0), "tensor": (300, 2.5), "ollama": (300, 2.5), "names": (300, 1.0),
                    "capture": (150, 1.5), "ids": (150, 0.5)}


fuzz_header = load_script("fuzz_header")
fuzz_manifests = load_script("fuzz_manifests")


class HeaderInputs:
    """fuzz_header's target, keeping a digest of each input: how many ran, and which."""

    def __init__(self, folder: Path) -> None:
        self._target = fuzz_header.Target(folder)
        self.seen: list[str] = []

    def __call__(self, data: bytes, deep: bool = False) -> str:
        self.seen.append(f"{hashlib.sha256(data).hexdigest()} deep={deep}")
        return self._target(data, deep=deep)


class ManifestInputs:
    """fuzz_manifests' targets, keeping a digest of each input: how many ran, and which."""

    def __init__(self, folder: Path) -> None:
        self.targets = fuzz_manifests.Targets(folder)
        self.seen: list[str] = []

    def run(self, target: str, data: bytes) -> str:
        self.seen.append(f"{target} {hashlib.sha256(data).hexdigest()}")
        return self.targets.run(target, data)


def _smoke(make_test: Callable[[int], Callable[[], None]], examples: int) -> None:
    hypothesis.seed(SEED)(make_test(examples))()


def _time_boxed(make_test: Callable[[int], Callable[[], None]], seconds: float) -> None:
    """Run hypothesis batches (fresh random examples each) until ``seconds`` have passed."""
    deadline = time.monotonic() + seconds
    while True:
        make_test(BATCH)()
        if time.monotonic() >= deadline:
            return


def _fuzz(make_test: Callable[[int], Callable[[], None]], budget: tuple[int, float], seen: list[str]) -> None:
    examples, seconds = budget
    if FUZZ_SECONDS is None:
        _smoke(make_test, examples)
        assert len(seen) == examples
    else:
        _time_boxed(make_test, seconds * float(FUZZ_SECONDS))
        assert len(seen) >= BATCH


def test_fuzz_header_parser_info_and_scan(tmp_path: Path) -> None:
    seeds = fuzz_header.seed_corpus()
    assert len(seeds) >= 5
    target = HeaderInputs(tmp_path)
    # The harness is sound: the whole models built for the corpus (its last two seeds) are accepted;
    # header-only cuts of big fixtures and lone split shards are rejected.
    outcomes = [target(seed) for seed in seeds]
    assert outcomes[-2:] == ["accepted", "accepted"], outcomes
    target.seen.clear()
    _fuzz(lambda n: fuzz_header.hypothesis_test(target, seeds, n), HEADER_BUDGET, target.seen)


@pytest.mark.parametrize("target", sorted(MANIFEST_BUDGETS))
def test_fuzz_manifest_parsers(target: str, tmp_path: Path) -> None:
    inputs = ManifestInputs(tmp_path)
    for seed in fuzz_manifests.SEEDS[target]():
        assert inputs.targets.run(target, seed) in ("accepted", "rejected", "checked")
    _fuzz(lambda n: fuzz_manifests.hypothesis_test(inputs, target, n), MANIFEST_BUDGETS[target], inputs.seen)


def _smoke_inputs(folder: Path) -> list[str]:
    folder.mkdir()
    header, manifests = HeaderInputs(folder), ManifestInputs(folder)
    seeds = fuzz_header.seed_corpus()
    _smoke(lambda n: fuzz_header.hypothesis_test(header, seeds, n), 20)
    _smoke(lambda n: fuzz_manifests.hypothesis_test(manifests, "sums", n), 20)
    return header.seen + manifests.seen


def test_smoke_runs_repeat_their_inputs(tmp_path: Path) -> None:
    """The smoke run is the same inputs every time: a failure it finds is found again on the next run."""
    first, second = _smoke_inputs(tmp_path / "first"), _smoke_inputs(tmp_path / "second")
    # Varied inputs (hypothesis repeats some, and how many differs by platform), and the same ones again.
    assert len(first) == 40 and len(set(first)) >= 20
    assert second == first


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

    from support import run_cli, tensor_payload

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
