"""The verdict of a whole target from its files' decisions and its scan, and the next step in words.

Every command suggested is one its tool documents:

* Ollama: ``ollama rm`` and ``ollama pull`` (``ollama --help``). A pull alone keeps a blob that is already
  there, damaged or not (ollama/ollama#17520: "``ollama pull`` ... prints ``verifying sha256 digest`` /
  ``success`` while leaving the bad file in place"; ollama/ollama#213), and ``ollama rm`` deletes a blob
  only once no model uses it (ollama/ollama#8373: "you have to delete both models to remove the file").
  So the blob file itself is removed (or every model using it), then the model pulled again.
* Hugging Face: ``hf download REPO FILE --force-download`` (the ``hf`` CLI of huggingface_hub 1.0,
  https://huggingface.co/docs/huggingface_hub/guides/cli; ``force_download``: "re-download the file even if
  it is already cached", https://huggingface.co/docs/huggingface_hub/package_reference/file_download).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from ..scan.report import KINDS, ScanReport
from ..stores.ollama import OllamaStore
from ..stores.hf_cache import HFStore
from ..stores.hf_local import HFLocalStore
from ..stores.registry import Store
from .decide import AGREEMENT, DAMAGED, INTACT, MANIFEST, NONFINITE, PUBLISHED, READ_PATH, UNVERIFIED, VERDICTS, \
    Conclusion
from .report import CheckReport, FileCheck

#: Non-finite kinds of a scan (an outlier or an anomaly is a warning, not a stored NaN or Inf).
NONFINITE_KINDS = tuple(k for k in KINDS if k in ("nan", "+inf", "-inf"))
#: Findings listed in a stored-nonfinite conclusion's evidence (all are counted).
MAX_LISTED = 64


def summarize(*, target: str, store: Store | None, files: tuple[FileCheck, ...], modes: tuple[str, ...],
              scans: tuple[ScanReport, ...], scan_path: str, seconds: float) -> CheckReport:
    """The report: the worst file verdict, or ``nonfinite`` when the bytes are right and hold NaN or Inf."""
    verdict = min((f.decision.verdict for f in files), key=VERDICTS.index, default=UNVERIFIED)
    found = [_with_file(c, f.path) for f in files for c in f.decision.conclusions]
    stored = _stored_nonfinite(scans, scan_path, files)
    if stored is not None:
        found.append(stored)
        if verdict in (INTACT, UNVERIFIED):
            verdict = NONFINITE
    found.extend(_structure(scans))
    skipped = {m: why for f in files for m, why in f.skipped.items()}
    compared = tuple(m for m in modes if m not in skipped)
    warnings = [f"{m} reads skipped: {why}; compared: {', '.join(compared)}" for m, why in skipped.items()]
    warnings += [w for s in scans for w in s.warnings]
    if verdict == UNVERIFIED and not any(c.code == "read-path-differs" for c in found):
        found.append(Conclusion(code="nothing-wrong", text="nothing wrong was found: every path delivered the same "
                                "bytes and they hold no NaN or Inf, but nothing published says they are the "
                                "publisher's"))
    return CheckReport(target=target, store=None if store is None else store.prefix.rstrip(":"),
                       name=store.name if store is not None else target, files=files, modes=compared, scans=scans,
                       scan_path=scan_path, verdict=verdict, reference=_reference(files), conclusions=tuple(found),
                       next_steps=tuple(next_steps(verdict, store, files, found)), warnings=tuple(warnings),
                       seconds=seconds)


def _with_file(c: Conclusion, path: str) -> Conclusion:
    return Conclusion(code=c.code, text=c.text, evidence={"file": path, **c.evidence})


def _reference(files: Sequence[FileCheck]) -> str | None:
    """What decided the report: the weakest evidence any file was decided by (a published digest is the
    strongest, agreement the weakest; None when one file could not be decided)."""
    order = (PUBLISHED, MANIFEST, AGREEMENT, None)
    return max((f.decision.reference for f in files), key=order.index, default=None)


def _stored_nonfinite(scans: Sequence[ScanReport], scan_path: str, files: Sequence[FileCheck]) -> Conclusion | None:
    found = [(t, f) for s in scans for t in s.tensors for f in t.findings if f.kind in NONFINITE_KINDS]
    counted = sum(t.counts.get(k, 0) for s in scans for t in s.tensors for k in NONFINITE_KINDS)
    if not counted:
        return None
    wrong = any(scan_path in f.decision.wrong for f in files)
    tensors = sorted({t.name for t, _ in found})
    seen = (f"; they were seen through {scan_path} reads, which deliver other bytes here: they may come from the "
            "read path, not the file") if wrong else ""
    first = found[0][1] if found else None
    where = (f" (first: tensor {first.tensor} row {first.row} column {first.column}, bits {first.bits})"
             if first is not None else "")
    return Conclusion(code="stored-nonfinite",
                      text=f"the file holds {counted} non-finite value{'s' if counted != 1 else ''} in "
                           f"{len(tensors)} tensor{'s' if len(tensors) != 1 else ''}{where}{seen}",
                      evidence={"count": counted, "path": scan_path, "findings": [_finding(t.name, f)
                                                                                  for t, f in found[:MAX_LISTED]]})


def _finding(tensor: str, f: Any) -> dict[str, Any]:
    return {"tensor": tensor, "file": f.path, **f.to_json()}


def _structure(scans: Sequence[ScanReport]) -> list[Conclusion]:
    return [Conclusion(code="structure", text=f"{s.kind}: {s.length} bytes no tensor owns at offset {s.offset} of "
                                              f"{s.path}",
                       evidence={"file": s.path, "kind": s.kind, "offset": s.offset, "length": s.length})
            for scan in scans for s in scan.structure]


def next_steps(verdict: str, store: Store | None, files: Sequence[FileCheck], found: Sequence[Conclusion]) -> list[str]:
    """What it rules out and what to do next, in the order to do it."""
    if verdict == INTACT:
        return ["the non-finite values an engine computes do not come from the file or from reading it on this "
                "machine: they are computed (the engine, its backend, the GPU driver); report them there"]
    if verdict == DAMAGED:
        return _redownload(store, [f for f in files if f.decision.verdict == DAMAGED])
    if verdict == NONFINITE:
        if _reference(files) in (PUBLISHED, MANIFEST):
            return ["the publisher's file itself holds these values: report them to the publisher (the tensor, "
                    "row and bits are above); a download again gives the same bytes"]
        return ["this file holds these values as stored (the tensor, row and bits are above); check it against "
                "its published sha256 (`--sha256 HEX`, `--sums FILE`) to tell a damaged download from the "
                "publisher's own file, whose publisher should then hear of it"]
    if verdict == READ_PATH:
        return _read_path_steps(found)
    return ["to decide which bytes are the publisher's, make a manifest where the model works (`ggaudit manifest "
            "MODEL -o model.manifest.json` there) and check against it here (`ggaudit check MODEL --manifest "
            "model.manifest.json`), or give the published sha256 (`--sha256 HEX`, `--sums FILE`)"]


def _redownload(store: Store | None, damaged: Sequence[FileCheck]) -> list[str]:
    if isinstance(store, OllamaStore):
        blobs = ", ".join(os.path.basename(f.path) for f in damaged)
        return [f"the download is damaged: `ollama pull` alone keeps a blob that is already there, so delete the "
                f"damaged blob file ({blobs}, in the store's blobs folder) with Ollama stopped, or `ollama rm` every "
                f"model that uses it, then `ollama pull {store.name}`"]
    if isinstance(store, (HFStore, HFLocalStore)):
        repo = store.name.partition(":")[0] if isinstance(store, HFStore) else "REPO"
        names = " ".join(os.path.basename(f.path) for f in damaged)
        return [f"the download is damaged: download it again, replacing the copy: `hf download {repo} {names} "
                "--force-download`" + (" --local-dir DIR" if isinstance(store, HFLocalStore) else "")]
    return ["the file differs from what was published: download it again and check again; if a new download "
            "differs the same way, tell the publisher"]


def _read_path_steps(found: Sequence[Conclusion]) -> list[str]:
    steps = []
    for c in found:
        if c.code != "read-path-differs":
            continue
        wrong = list(c.evidence.get("paths", ()))
        if not c.evidence.get("decided"):
            steps.append("to decide which bytes are the file's, make a manifest where the model works (`ggaudit "
                         "manifest MODEL -o model.manifest.json` there) and check against it here (`ggaudit check "
                         "MODEL --manifest model.manifest.json`)")
        elif wrong == ["mmap"]:
            steps.append("engines that map the file (Ollama, llama.cpp, LM Studio) get the wrong bytes: llama.cpp's "
                         "`--no-mmap` reads the file instead; report it to the maker of the filesystem, storage or "
                         "VM layer under the file, with this report")
        elif wrong == ["direct"]:
            steps.append("engines reading with direct I/O get the wrong bytes: turn direct I/O off in the engine; "
                         "report it to the maker of the storage driver or VM layer, with this report")
        else:
            steps.append("the page cache holds other bytes than the disk: test the RAM (memtest86+), and check "
                         "filter drivers (antivirus, encryption) and the VM or storage layer; report it there")
    return steps
