"""``check`` from below, every way at once (issue 32): fault kinds x read paths x once or every time x what
decides (a published sha256, an Ollama store, a tensor manifest, nothing). Each case runs ``python -m ggaudit
check`` under the fault layer (tests/faultlayer.c) and must give the verdict, the right and wrong paths and
whether it was decided that the evidence proves, and never exit 0. The oracle below is worked out from what
each fault does (a flipped quant or a NaN scale only some path delivers), not from a run.

It is a lane of its own (``scripts/below_lane.sh``, run by CI: ``GGAUDIT_BELOW_MATRIX=1``): some 90 children
of a second each would double the default suite's time. Without the variable the cases are skipped.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ggaudit.format.blocks import GGMLQuantizationType as T
from ggaudit.format.build import TensorSpec, gguf_bytes
from ggaudit.format.layout import open_model
from ggaudit.verify.manifests.tensor import build_tensor_manifest, write_tensor_manifest
from fault_support import faulted_env, run_ggaudit
from ollama_support import ollama_store
from platforms import needs_linux

pytestmark = [needs_linux, pytest.mark.skipif(not os.environ.get("GGAUDIT_BELOW_MATRIX"),
                                              reason="the matrix from below is a CI lane of its own: "
                                                     "GGAUDIT_BELOW_MATRIX=1 (scripts/below_lane.sh)")]

FIXTURE = Path(__file__).parent.parent / "fixtures" / "ple_q8_0.gguf"
PLE = "per_layer_token_embd.weight"
BUFFERED, MMAP, DIRECT = "buffered", "mmap", "direct"


def _ple_block(row: int, block: int) -> int:
    table = open_model(FIXTURE).tensor(PLE)
    return table.offset + row * table.row_bytes + block * 34


#: The faults: a flipped quant (qs[4] of block 1 of row 100) and a NaN scale (fp16 0xffff over d of block 2).
FAULTS = {"flip": dict(offset=_ple_block(100, 1) + 6, mask=0x10),
          "nan-scale": dict(offset=_ple_block(100, 2), length=2, byte=0xFF)}
KIND = {"flip": "flip", "nan-scale": "fill"}

#: What decides (``--sha256``, an Ollama store's layer digest, a tensor manifest, nothing) and its reference.
DECIDES = {"sha256": "published", "ollama": "published", "manifest": "manifest", "nothing": None}


def oracle(path: str, times: str, decides: str) -> tuple[str, str | None, list[str], list[str], bool]:
    """(verdict, reference, right, wrong, decided) a case must give, from what the fault does.

    A published digest (or a manifest) decides which paths are right; mmap, which computes no digest, is
    credited through a path that delivered the same bytes. Direct reads wrong with the page cache right go
    to the eviction test: the page read again from the device gives the page cache's bytes (the ``direct``
    kind: direct reads are wrong) or the direct ones (``device``: the device holds other bytes). Faulted
    once, direct's first read alone was wrong: read again it delivers the page cache's bytes. With nothing
    published, the page cache against the device stays undecided unless direct, read again, agrees. Faulted
    once, buffered's first read is the plan's (of the header and the window read ahead)."""
    ref = DECIDES[decides]
    if times == "once" and path in (BUFFERED, "pagecache"):
        # The first buffered read of the file is the plan's, of its header and the window read ahead: the passes
        # deliver the right bytes, and only that read is found wrong (plan-read-differs), whatever decides.
        return "read-path", ref, [BUFFERED, MMAP, DIRECT], [], ref is not None
    if times == "once" and path == DIRECT:
        return "read-path", ref or "agreement", [BUFFERED, MMAP], [DIRECT], True
    if ref is None:
        return {BUFFERED: ("read-path", "agreement", [MMAP, DIRECT], [BUFFERED], True),
                MMAP: ("read-path", "agreement", [BUFFERED, DIRECT], [MMAP], True)}.get(
            path, ("read-path", None, [], [DIRECT], False))
    return {BUFFERED: ("read-path", ref, [MMAP, DIRECT], [BUFFERED], True),
            MMAP: ("read-path", ref, [BUFFERED, DIRECT], [MMAP], True),
            DIRECT: ("read-path", ref, [BUFFERED, MMAP], [DIRECT], True),
            "pagecache": ("read-path", ref, [DIRECT], [BUFFERED, MMAP], True),
            "device": ("damaged", ref, [BUFFERED, MMAP], [DIRECT], True)}[path]


CASES = [(fault, path, times, decides) for fault in FAULTS for path in (BUFFERED, MMAP, DIRECT, "pagecache", "device")
         for times in ("always", "once") for decides in DECIDES if not (path == "device" and times == "once")]


def _projector() -> bytes:
    data, _ = gguf_bytes([TensorSpec("mm.weight", T.F32, (16, 4), np.arange(64, dtype="<f4").tobytes())],
                         {"general.architecture": "clip"})
    return data


def _target(folder: Path, decides: str) -> tuple[Path, list[str]]:
    """The model file the fault is on and the check's arguments for ``decides``."""
    if decides == "ollama":
        blob, _ = ollama_store(folder / "ollama", FIXTURE.read_bytes(), _projector(), name="clef-flash")
        return blob, ["ollama:clef-flash", "--store", str(folder / "ollama")]
    model = folder / "model.gguf"
    shutil.copyfile(FIXTURE, model)
    if decides == "sha256":
        return model, [str(model), "--sha256", hashlib.sha256(FIXTURE.read_bytes()).hexdigest()]
    if decides == "manifest":
        manifest = folder / "model.manifest.json"
        write_tensor_manifest(build_tensor_manifest(FIXTURE), manifest)
        return model, [str(model), "--manifest", str(manifest)]
    return model, [str(model)]


@pytest.mark.parametrize("fault, path, times, decides", CASES)
def test_check_under_a_fault_below_gives_what_the_evidence_proves(ddir: Path, fault: str, path: str, times: str,
                                                                   decides: str) -> None:
    model, args = _target(ddir, decides)
    os.sync()
    log = ddir / "faults.log"
    env = faulted_env(model, path, KIND[fault], times=times, log=log, **FAULTS[fault])
    done = run_ggaudit(["check", *args, "--json"], env)
    assert log.read_text(), "the fault never fired"
    assert done.code == 1, done.stderr              # a fault that fired is never clean
    report: dict[str, Any] = json.loads(done.stdout)["models"][0]
    entry = next(f for f in report["files"] if f["path"] == str(model))
    verdict, reference, right, wrong, decided = oracle(path, times, decides)
    assert (entry["verdict"], entry["reference"], entry["right"], entry["wrong"], entry["decided"]) == (
        verdict, reference, right, wrong, decided), [c["text"] for c in entry["conclusions"]]
    stored = [c for c in report["conclusions"] if c["code"] == "stored-nonfinite"]
    assert stored == []             # the file holds no NaN: what a wrong path delivered is that path's
    if fault == "nan-scale" and MMAP in wrong:
        [through] = [c for c in report["conclusions"] if c["code"] == "read-path-nonfinite"]
        assert through["evidence"]["findings"][0]["offset"] == FAULTS[fault]["offset"]
    if verdict != "damaged":
        assert not any("every read path" in c["text"] for c in entry["conclusions"])
    on_disk = [c for c in entry["conclusions"] if "the file on disk is intact" in c["text"]]
    assert not on_disk or (reference is not None and DIRECT in right), on_disk


def test_the_matrix_counts_its_cases() -> None:
    """2 faults x (5 paths x 2 times - device once) x 4 deciders."""
    assert len(CASES) == 2 * 9 * 4 == 72
