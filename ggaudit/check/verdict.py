"""The verdict of a whole target from its files' decisions and its scan, and the next step in words.

Every command suggested is one its tool documents:

* Ollama: ``ollama rm`` and ``ollama pull`` (``ollama --help``). A pull alone keeps a blob that is already
  there, damaged or not (ollama/ollama#17520: "``ollama pull`` ... prints ``verifying sha256 digest`` /
  ``success`` while leaving the bad file in place"; ollama/ollama#213), and ``ollama rm`` deletes a blob
  only once no model uses it (ollama/ollama#8373: "you have to delete both models to remove the file").
  So the blob file itself is removed (or every model using it), then the model pulled again.
* Hugging Face: ``hf download REPO FILE --force-download`` (the ``hf`` CLI of huggingface_hub 1.0,
  https://huggingface.co/docs/huggingface_hub/guides/cli; ``force_download``: "re-download the file even if
  it is already cached", https://huggingface.co/docs/huggingface_hub/package_reference/file_download);
  ``--local-dir DIR`` for a download into a folder (the same guide, "Download to a local folder").
* GPT4All has no command line: its documentation downloads a model in the app (Models, ``+ Add Model``,
  search, ``Download``: gpt4all-bindings/python/docs/gpt4all_desktop/models.md, "Download Models"), so the
  damaged file is deleted (GPT4All closed) and downloaded again there.
* LM Studio keeps no digest, so a check of its models is never ``damaged``: nothing is suggested for it.
* llama.cpp: ``--load-mode MODE`` (``-lm``), ``none`` "no special loading mode" (reads the file: no mapping)
  and ``dio`` "use DirectIO if available" (tools/server/README.md, "Common params", at ggml-org/llama.cpp
  00dc8057); it replaces ``--no-mmap``, deprecated and mapped to ``--load-mode none``
  (ggml-org/llama.cpp discussion #26469).
* Ollama: the model option ``use_mmap`` (docs/api.md, "Generate request (With options)", at ollama/ollama
  01e52d24), ``"options": {"use_mmap": false}`` in a request.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from ..scan.report import KINDS, Finding, ScanReport, TensorScan
from ..stores.gpt4all import GPT4AllStore
from ..stores.ollama import OllamaStore
from ..stores.hf_cache import HFStore
from ..stores.hf_local import HFLocalStore
from ..stores.registry import Store
from .decide import AGREEMENT, DAMAGED, INTACT, MANIFEST, NONFINITE, PUBLISHED, READ_PATH, UNVERIFIED, VERDICTS, \
    Conclusion
from .expect import file_key
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
    nonfinite = _nonfinite(scans, scan_path, files)
    found.extend(nonfinite)
    if any(c.code == "stored-nonfinite" for c in nonfinite) and verdict in (INTACT, UNVERIFIED):
        verdict = NONFINITE
    found.extend(_structure(scans))
    found.extend(_header(scans))
    skipped = {m: why for f in files for m, why in f.skipped.items()}
    compared = tuple(m for m in modes if m not in skipped)
    warnings = [f"{m} reads skipped: {why}; compared: {', '.join(compared)}" for m, why in skipped.items()]
    warnings += [w for s in scans for w in s.warnings]
    # Said only when nothing at all was found: a scan finding (structure, metadata, template, outlier) is wrong.
    if verdict == UNVERIFIED and not any(c.code == "read-path-differs" for c in found) and all(s.ok for s in scans):
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


def _nonfinite(scans: Sequence[ScanReport], scan_path: str, files: Sequence[FileCheck]) -> list[Conclusion]:
    """The scan's non-finite values, told apart by whether the bytes they were found in are the file's.

    The scan rides on the ``scan_path`` pass. Where that path delivered other bytes of a tensor than the
    path that decided (or, undecided, than another path), what the scan found in that tensor shows what
    the path delivered, not what the file holds: ``read-path-nonfinite``. The other tensors' bytes are the
    ones every path delivered: what the scan found there is in the file (``stored-nonfinite``)."""
    deviating = {(f.path, t): c for f in files for c in f.decision.conclusions if c.code == "read-path-differs"
                 and (scan_path in c.evidence.get("paths", ()) or not c.evidence.get("decided"))
                 for t in c.evidence.get("tensors", ())}
    through = [t for s in scans for t in s.tensors if (t.path, t.name) in deviating]
    stored = [t for s in scans for t in s.tensors if (t.path, t.name) not in deviating]
    found = [_stored_nonfinite(stored, scan_path)]
    if through:
        found.append(_read_path_nonfinite(through, scan_path, deviating[(through[0].path, through[0].name)]))
    return [c for c in found if c is not None]


def _counted(tensors: Sequence[TensorScan]) -> tuple[int, list[tuple[str, Finding]], str]:
    """How many non-finite values the tensors hold, the listed findings, and "N values in M tensors
    (first: ...)" in words."""
    listed = [(t.name, f) for t in tensors for f in t.findings if f.kind in NONFINITE_KINDS]
    counted = sum(t.counts.get(k, 0) for t in tensors for k in NONFINITE_KINDS)
    names = {t.name for t in tensors if any(t.counts.get(k, 0) for k in NONFINITE_KINDS)}
    first = listed[0][1] if listed else None
    where = (f" (first: tensor {first.tensor} row {first.row} column {first.column}, bits {first.bits})"
             if first is not None else "")
    return counted, listed, (f"{counted} non-finite value{'s' if counted != 1 else ''} in {len(names)} "
                             f"tensor{'s' if len(names) != 1 else ''}{where}")


def _stored_nonfinite(tensors: Sequence[TensorScan], scan_path: str) -> Conclusion | None:
    counted, listed, words = _counted(tensors)
    if not counted:
        return None
    return Conclusion(code="stored-nonfinite", text=f"the file holds {words}",
                      evidence={"count": counted, "path": scan_path,
                                "findings": [_finding(t, f) for t, f in listed[:MAX_LISTED]]})


def _read_path_nonfinite(tensors: Sequence[TensorScan], scan_path: str, deviation: Conclusion) -> Conclusion | None:
    counted, listed, words = _counted(tensors)
    if not counted:
        return None
    others = list(deviation.evidence.get("agree", ()))
    decided = bool(deviation.evidence.get("decided"))
    file_bytes = (f"; the file's bytes are what {_and(others)} read" if decided and others else
                  "; which bytes are the file's is not known")
    return Conclusion(code="read-path-nonfinite",
                      text=f"{words} came through {scan_path} reads, which deliver other bytes of "
                           f"{'this tensor' if len({t.name for t in tensors}) == 1 else 'these tensors'} than "
                           f"{_and(others) or 'the other paths'} reads on this machine: they show what that read "
                           f"path delivered, not what the file holds{file_bytes}",
                      evidence={"count": counted, "path": scan_path, "agree": others, "decided": decided,
                                "findings": [_finding(t, f) for t, f in listed[:MAX_LISTED]]})


def _and(items: Sequence[str]) -> str:
    items = list(items)
    return "" if not items else items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _finding(tensor: str, f: Any) -> dict[str, Any]:
    return {"tensor": tensor, "file": f.path, **f.to_json()}


def _structure(scans: Sequence[ScanReport]) -> list[Conclusion]:
    return [Conclusion(code="structure", text=f"{s.kind}: {s.length} bytes no tensor owns at offset {s.offset} of "
                                              f"{s.path}",
                       evidence={"file": s.path, "kind": s.kind, "offset": s.offset, "length": s.length})
            for scan in scans for s in scan.structure]


def _header(scans: Sequence[ScanReport]) -> list[Conclusion]:
    """The header's findings: metadata contradicting the tensors, chat templates that run code or hide content."""
    return [*(Conclusion(code="metadata", text=f"{m.severity}: {m.key} = {m.value}: expected {m.expected}, got "
                                              f"{m.actual}" + (f" (tensor {m.tensor})" if m.tensor else ""),
                         evidence=m.to_json()) for scan in scans for m in scan.metadata),
            *(Conclusion(code="template", text=f"{t.severity}: {t.key} line {t.line} column {t.column}: {t.detail}",
                         evidence=t.to_json()) for scan in scans for t in scan.templates)]


def next_steps(verdict: str, store: Store | None, files: Sequence[FileCheck], found: Sequence[Conclusion]) -> list[str]:
    """What it rules out and what to do next, in the order to do it."""
    if verdict == INTACT:
        return ["the non-finite values an engine computes do not come from the file or from reading it on this "
                "machine: they are computed (the engine, its backend, the GPU driver); report them there"]
    if verdict == DAMAGED:
        return _redownload(store, [f for f in files if f.decision.verdict == DAMAGED])
    if verdict == NONFINITE:
        where = _where_stored(found)
        if _reference(files) in (PUBLISHED, MANIFEST):
            return [f"the publisher's file holds {where}: report it to the publisher, with this report; downloading "
                    "it again gives the same bytes"]
        return [f"this file holds {where} as stored; check it against its published sha256 (`--sha256 HEX`, "
                "`--sums FILE`) to tell a damaged download from the publisher's own file, whose publisher should "
                "then hear of it"]
    if verdict == READ_PATH:
        return _read_path_steps(found)
    return ["to decide which bytes are the publisher's, make a manifest where the model works (`ggaudit manifest "
            "MODEL -o model.manifest.json` there) and check against it here (`ggaudit check MODEL --manifest "
            "model.manifest.json`), or give the published sha256 (`--sha256 HEX`, `--sums FILE`)"]


def _repo_names(damaged: Sequence[FileCheck], names: dict[str, str]) -> str:
    """The damaged files as the repository names them (``gguf/model.gguf``), for ``hf download``."""
    return " ".join(names.get(file_key(f.path), os.path.basename(f.path)) for f in damaged)


def _where_stored(found: Sequence[Conclusion]) -> str:
    """"NaN at tensor T row R column C (and N more)": where the scan found the first stored non-finite value."""
    stored = next(c for c in found if c.code == "stored-nonfinite")
    listed = stored.evidence.get("findings") or []
    more = int(stored.evidence.get("count", 0)) - 1
    if not listed:
        return "non-finite values"
    first = listed[0]
    kind = "NaN" if first.get("kind") == "nan" else "Inf"
    return (f"{kind} at tensor {first.get('tensor')} row {first.get('row')} column {first.get('column')} (offset "
            f"{first.get('offset')}, bits {first.get('bits')})" + (f" and {more} more" if more > 0 else ""))


def _redownload(store: Store | None, damaged: Sequence[FileCheck]) -> list[str]:
    if isinstance(store, OllamaStore):
        blobs = ", ".join(os.path.basename(f.path) for f in damaged)
        return [f"the download is damaged: `ollama pull` alone keeps a blob that is already there, so delete the "
                f"damaged blob file ({blobs}, in the store's blobs folder) with Ollama stopped, or `ollama rm` every "
                f"model that uses it, then `ollama pull {store.name}`"]
    if isinstance(store, HFStore):
        snapshot = store.expectations()
        names = _repo_names(damaged, {file_key(f.link): f.name for f in snapshot.files})
        revision = "" if snapshot.spec.revision == "main" else f" --revision {snapshot.spec.revision}"
        return [f"the download is damaged: download it again, replacing the cached copy: `hf download "
                f"{snapshot.spec.repo_id} {names}{revision} --force-download`"]
    if isinstance(store, HFLocalStore):
        download = store.expectations()
        names = _repo_names(damaged, {file_key(f.path): f.name for f in download.files})
        return [f"the download is damaged: download it again into its folder, replacing the copy: `hf download "
                f"REPO {names} --force-download --local-dir {download.folder}` (REPO: the repository it came from)"]
    if isinstance(store, GPT4AllStore):
        names = ", ".join(os.path.basename(f.path) for f in damaged)
        return [f"the download is damaged: with GPT4All closed, delete {names} from its download folder, then "
                "download it again in GPT4All (Models, `+ Add Model`, search, `Download`)"]
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
            steps.append("engines that map the file (Ollama, llama.cpp, LM Studio) get the wrong bytes: reading "
                         "it instead avoids them (llama.cpp: `--load-mode none`, which replaces `--no-mmap`; "
                         "Ollama: the option `use_mmap` set to false, `\"options\": {\"use_mmap\": false}` in a "
                         "request); report it to the maker of the filesystem, storage driver or VM layer under the "
                         "file, with this report")
        elif wrong == ["direct"]:
            steps.append("engines reading with direct I/O get the wrong bytes: read through the page cache instead "
                         "(llama.cpp: a `--load-mode` other than `dio`); report it to the maker of the storage "
                         "driver or VM layer, with this report")
        else:
            steps.append("the page cache holds other bytes than the disk: engines reading through it (a mapping or "
                         "plain reads) get the wrong bytes, direct I/O reads the disk's (llama.cpp: `--load-mode "
                         "dio`); test the RAM (memtest86+), check filter drivers (antivirus, encryption) and the "
                         "VM or storage layer, and report it there, with this report")
    return steps
