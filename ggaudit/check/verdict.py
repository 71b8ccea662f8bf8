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

from ..evidence.paths import MODES
from ..io.shell import shell_word
from ..scan.report import KINDS, Finding, ScanReport, TensorScan
from ..stores.registry import Store
from .facts import (AGREEMENT, CACHE_VERIFIED, DAMAGED, INTACT, MANIFEST, NONFINITE, PUBLISHED, READ_PATH, STRUCTURE,
                    UNVERIFIED, VERDICTS, Conclusion, Verdict)
from .report import FINDING_KINDS, CheckReport, FileCheck

#: Non-finite kinds of a scan (an outlier or an anomaly is a warning, not a stored NaN or Inf).
NONFINITE_KINDS = tuple(k for k in KINDS if k in ("nan", "+inf", "-inf"))
#: Findings listed in a stored-nonfinite conclusion's evidence (all are counted).
MAX_LISTED = 64
#: The verdicts of bytes read right (or, nothing published, alike on every path): what they hold may still
#: make the verdict (a NaN stored, bytes no tensor owns).
READ_RIGHT = (INTACT, CACHE_VERIFIED, UNVERIFIED)


def summarize(*, target: str, store: Store | None, files: tuple[FileCheck, ...], modes: tuple[str, ...],
              scans: tuple[ScanReport, ...], scan_path: str, seconds: float,
              through: tuple[ScanReport, ...] = ()) -> CheckReport:
    """The report: the worst file verdict, or ``nonfinite`` when the bytes are right and hold NaN or Inf.
    ``scans``: what the file's bytes hold; ``through``: the scan of what the scan's path delivered of the
    files it is decided wrong about (those were scanned again through a right path)."""
    verdict: Verdict = min((f.decision.verdict for f in files), key=VERDICTS.index, default=UNVERIFIED)
    found = [_with_file(c, f.path) for f in files for c in f.decision.conclusions]
    nonfinite, delivered = _nonfinite(scans, scan_path, files, through)
    found.extend(nonfinite)
    # Bytes read right that hold something wrong: the verdict says what (a NaN is worse than stray bytes).
    if any(c.code == "stored-nonfinite" for c in nonfinite) and verdict in READ_RIGHT:
        verdict = NONFINITE
    structure = _structure(scans)
    if structure and verdict in READ_RIGHT:
        verdict = STRUCTURE
    found.extend(structure)
    found.extend(_structure_through(scans, through, scan_path))
    found.extend(_header(scans))
    skipped = {m: why for f in files for m, why in f.skipped.items()}
    compared = tuple(m for m in modes if m not in skipped)
    warnings = [f"{m} reads skipped: {why}; compared: {', '.join(compared)}" for m, why in skipped.items()]
    warnings += [w for f in files for w in f.warnings]
    warnings += [w for s in scans for w in s.warnings]
    # Said only when nothing at all was found: a scan finding (structure, metadata, template, outlier) is wrong.
    if verdict == UNVERIFIED and not any(c.code in FINDING_KINDS for c in found) and all(s.ok for s in scans):
        found.append(Conclusion(code="nothing-wrong", text="nothing wrong was found: every path delivered the same "
                                f"bytes and {_held(scans)}, but nothing published says they are the publisher's"))
    return CheckReport(target=target, store=None if store is None else store.prefix.rstrip(":"),
                       name=store.name if store is not None else target, files=files, modes=compared, scans=scans,
                       scan_path=scan_path, verdict=verdict, reference=_reference(files), conclusions=tuple(found),
                       next_steps=tuple(next_steps(verdict, store, files, found, target=target)),
                       warnings=tuple(warnings), seconds=seconds, delivered=delivered,
                       engine=None if store is None else store.ENGINE)


def _with_file(c: Conclusion, path: str) -> Conclusion:
    return Conclusion(code=c.code, text=c.text, evidence={"file": path, **c.evidence})


def _reference(files: Sequence[FileCheck]) -> str | None:
    """What decided the report: the weakest evidence any file was decided by (a published digest is the
    strongest, agreement the weakest; None when one file could not be decided)."""
    order = (PUBLISHED, MANIFEST, AGREEMENT, None)
    return max((f.decision.reference for f in files), key=order.index, default=None)


def _nonfinite(scans: Sequence[ScanReport], scan_path: str, files: Sequence[FileCheck],
               through: Sequence[ScanReport] = ()) -> tuple[list[Conclusion], tuple[Finding, ...]]:
    """The scan's non-finite values, told apart by whether the bytes they were found in are the file's.

    The scan rides on the ``scan_path`` pass. A file that path is decided wrong about was scanned again through
    a right path (``scans``), and what the scan path delivered of it is ``through``: its findings in the tensors
    it read wrong are that path's, ``read-path-nonfinite``. Undecided, what the scan found in a tensor the paths
    disagree on is said the same way, which bytes are the file's not known. Everything else is in the file
    (``stored-nonfinite``). Also the listed findings that path delivered (``check/nonfinite-delivered``
    diagnostics), none at an offset where the file itself holds one: a value is the file's or the path's,
    never both."""
    deviating = {(f.path, t): c for f in files for c in f.decision.conclusions if c.code == "read-path-differs"
                 and (scan_path in c.evidence.get("paths", ()) or not c.evidence.get("decided"))
                 for t in c.evidence.get("tensors", ())}
    again = {t.path for s in through for t in s.tensors}
    by_path = [t for s in through for t in s.tensors if (t.path, t.name) in deviating]
    by_path += [t for s in scans for t in s.tensors if t.path not in again and (t.path, t.name) in deviating]
    stored = [t for s in scans for t in s.tensors if t.path in again or (t.path, t.name) not in deviating]
    scanned_by = next((f.decision.right[0] for f in files if f.path in again and f.decision.right), scan_path)
    found = [_stored_nonfinite(stored, scanned_by)]
    if by_path:
        found.append(_read_path_nonfinite(by_path, scan_path, deviating[(by_path[0].path, by_path[0].name)]))
    in_file = {(f.path, f.offset) for t in stored for f in t.findings}
    delivered = tuple(f for t in by_path for f in t.findings
                      if f.kind in NONFINITE_KINDS and (f.path, f.offset) not in in_file)
    return [c for c in found if c is not None], delivered


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
    sides = (list(deviation.evidence.get("paths", ())), list(deviation.evidence.get("agree", ())))
    others = sides[1] if scan_path in sides[0] else sides[0]
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
                       evidence={"file": s.path, "kind": s.kind, "offset": s.offset, "length": s.length,
                                 "head": s.head})
            for scan in scans for s in scan.structure]


def _structure_through(scans: Sequence[ScanReport], through: Sequence[ScanReport], scan_path: str) -> list[Conclusion]:
    """Bytes no tensor owns that look wrong only as the scan's path, decided wrong, delivered them: that
    path's finding, not the file's (the file, read again through a right path, holds no such bytes there)."""
    stored = {(s.path, s.offset, s.kind) for scan in scans for s in scan.structure}
    return [Conclusion(code="read-path-structure",
                       text=f"{s.kind}: {s.length} bytes no tensor owns at offset {s.offset} of {s.path} as "
                            f"{scan_path} reads delivered them; the file's bytes there, read through a right path, "
                            "are not",
                       evidence={"file": s.path, "kind": s.kind, "offset": s.offset, "length": s.length,
                                 "path": scan_path})
            for scan in through for s in scan.structure if (s.path, s.offset, s.kind) not in stored]


def _held(scans: Sequence[ScanReport]) -> str:
    """What the scans found nothing wrong in: the tensors' values, or a vocabulary-only file's header."""
    if any(s.tensors for s in scans):
        return "they hold no NaN or Inf"
    keys = dict.fromkeys(k for s in scans for k in s.header_checked)
    return f"nothing is wrong in {', '.join(keys)} (no tensor data)"


def _header(scans: Sequence[ScanReport]) -> list[Conclusion]:
    """The header's findings: metadata contradicting the tensors, chat templates that run code or hide content."""
    return [*(Conclusion(code="metadata", text=f"{m.severity}: {m.key} = {m.value}: expected {m.expected}, got "
                                              f"{m.actual}" + (f" (tensor {m.tensor})" if m.tensor else ""),
                         evidence=m.to_json()) for scan in scans for m in scan.metadata),
            *(Conclusion(code="template", text=f"{t.severity}: {t.key} line {t.line} column {t.column}: {t.detail}",
                         evidence=t.to_json()) for scan in scans for t in scan.templates)]


def next_steps(verdict: str, store: Store | None, files: Sequence[FileCheck], found: Sequence[Conclusion], *,
               target: str = "MODEL") -> list[str]:
    """What it rules out and what to do next, in the order to do it; ``target``: the model as the user named it
    (in the commands suggested)."""
    if verdict == INTACT:
        return ["the non-finite values an engine computes do not come from the file or from reading it on this "
                "machine: they are computed (the engine, its backend, the GPU driver); report them there"]
    if verdict == CACHE_VERIFIED:
        return ["the bytes the page cache delivers are the published ones, and the device was not read past it: to "
                "check the file on disk too, copy it to a disk's filesystem (where direct reads work) and check the "
                "copy there (`ggaudit check COPY --sha256 HEX`)"]
    if verdict == DAMAGED:
        held = [c for c in found if c.code == "device-differs"]
        first = [_copy_now(held)] if held else []
        return first + _redownload(store, [f for f in files if f.decision.verdict == DAMAGED])
    if verdict == NONFINITE:
        where = _where_stored(found)
        if _reference(files) in (PUBLISHED, MANIFEST):
            return [f"the publisher's file holds {where}: report it to the publisher, with this report; downloading "
                    "it again gives the same bytes"]
        return [f"this file holds {where} as stored; check it against its published sha256 (`--sha256 HEX`, "
                "`--sums FILE`) to tell a damaged download from the publisher's own file, whose publisher should "
                "then hear of it"]
    if verdict == STRUCTURE:
        return [_structure_step(found, _reference(files))]
    if verdict == READ_PATH:
        return [*_replay_step(found, store, target), *_read_path_steps(found)]
    return ["to decide which bytes are the publisher's, make a manifest where the model works (`ggaudit manifest "
            "MODEL -o model.manifest.json` there) and check against it here (`ggaudit check MODEL --manifest "
            "model.manifest.json`), or give the published sha256 (`--sha256 HEX`, `--sums FILE`)"]


def _structure_step(found: Sequence[Conclusion], reference: str | None) -> str:
    """What to do about bytes no tensor owns: a manifest made from this file would only record them, so the
    step is to find out what they are, and (nothing published deciding) whether the publisher's file holds them."""
    first = next(c for c in found if c.code == "structure")
    e = first.evidence
    what = (f"{e.get('length')} bytes no tensor owns ({e.get('kind')}) at offset {e.get('offset')} of "
            f"{e.get('file')}, starting {e.get('head')}")
    if reference == PUBLISHED:
        return (f"the published file holds {what}: an engine loads the model without noticing them; find out what "
                "they are (`ggaudit scan FILE` lists each region), use a copy without them, and tell the publisher, "
                "with this report")
    return (f"this file holds {what}: an engine loads the model without noticing them; find out what they are "
            "(`ggaudit scan FILE` lists each region) and check the file against its published sha256 (`--sha256 "
            "HEX`, `--sums FILE`) to tell a file changed here from the publisher's own; a manifest made from this "
            "file would only record them")


def _replay_step(found: Sequence[Conclusion], store: Store | None, target: str) -> list[str]:
    """The command that replays, through each read path, the first rows where the paths differ."""
    differs = next((c for c in found if c.code == "read-path-differs"), None)
    if differs is None:
        return []
    e = differs.evidence
    first, runs = e.get("first"), e.get("where") or []
    if isinstance(first, dict) and first.get("tensor") is not None:
        tensor, ids = str(first["tensor"]), str(first["row"])
    elif runs and runs[0].get("rows"):
        tensor, ids = str(runs[0]["tensor"]), f"{runs[0]['rows'][0]}-{runs[0]['rows'][1]}"
    else:
        return []
    sides = {*e.get("agree", ()), *e.get("paths", ())}
    modes = ",".join(m for m in MODES if m in sides)
    root = "" if store is None or store.roots.store is None else f" --store {shell_word(os.fspath(store.roots.store))}"
    return [f"replay the rows where the paths first differ through each read path, to see what each delivers: "
            f"`ggaudit rows {shell_word(target)} --tensor {shell_word(tensor)} --ids {ids} --modes {modes}{root}`"]


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
    step = None if store is None else store.redownload([f.path for f in damaged])
    return [step or "the file differs from what was published: download it again and check again; if a new "
                    "download differs the same way, tell the publisher"]


def _copy_now(held: Sequence[Conclusion]) -> str:
    files = ", ".join(dict.fromkeys(str(c.evidence.get("file")) for c in held))
    return (f"the page cache may still hold the published bytes of {files}: copy it now, before a reboot empties the "
            "page cache (`cp FILE COPY`; `copy FILE COPY` on Windows), to another disk, and check the copy "
            "(`ggaudit check COPY --sha256 HEX`); then check this disk (`smartctl -a DEVICE`, smartmontools) and its "
            "filesystem")


def _read_path_steps(found: Sequence[Conclusion]) -> list[str]:
    steps: list[str] = []
    for c in found:
        if c.code != "read-path-differs":
            continue
        wrong = list(c.evidence.get("paths", ()))
        right = list(c.evidence.get("agree", ()))
        if not c.evidence.get("decided"):
            steps.append("to decide which bytes are the file's, make a manifest where the model works (`ggaudit "
                         "manifest MODEL -o model.manifest.json` there) and check against it here (`ggaudit check "
                         "MODEL --manifest model.manifest.json`)")
            continue
        steps.extend(step for step in _path_steps(wrong, right) if step not in steps)
    return steps


def _path_steps(wrong: Sequence[str], right: Sequence[str]) -> list[str]:
    """The next steps path by path: what each wrong path's readers (engines) meet, and who should hear of it;
    a page-cache path is blamed alone only when the other page-cache path delivered the right bytes."""
    steps = []
    if set(wrong) >= {"buffered", "mmap"}:
        steps.append("the page cache holds other bytes than the disk: engines reading through it (a mapping or "
                     "plain reads) get the wrong bytes, direct I/O reads the disk's (llama.cpp: `--load-mode "
                     "dio`); test the RAM (memtest86+), check filter drivers (antivirus, encryption) and the VM or "
                     "storage layer, and report it there, with this report")
    elif "mmap" in wrong:
        steps.append("engines that map the file (Ollama, llama.cpp, LM Studio) get the wrong bytes: reading it "
                     "instead avoids them (llama.cpp: `--load-mode none`, which replaces `--no-mmap`; Ollama: the "
                     "option `use_mmap` set to false, `\"options\": {\"use_mmap\": false}` in a request); report it "
                     "to the maker of the filesystem, storage driver or VM layer under the file, with this report")
    elif "buffered" in wrong:
        steps.append("engines reading the file with read calls (llama.cpp: `--load-mode none`) get the wrong bytes, "
                     "while a mapping of the same page cache delivers the right ones (llama.cpp's default, Ollama): "
                     "something on the way of read calls changes them; check filter drivers (antivirus, "
                     "encryption) and report it there, with this report")
    if "direct" in wrong:
        steps.append("engines reading with direct I/O get the wrong bytes: read through the page cache instead "
                     "(llama.cpp: a `--load-mode` other than `dio`); report it to the maker of the storage driver "
                     "or VM layer, with this report")
    return steps
