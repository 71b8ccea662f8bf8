"""A check report in words, for a terminal: the verdict first, naming the model as the user typed it; then
the evidence (what was compared with what, bytes, paths); then what it rules out and the next step."""

from __future__ import annotations

from collections.abc import Iterator

from ..lines import plural
from ..text import escape_message, escape_path
from .facts import CACHE_VERIFIED, DAMAGED, INTACT, NONFINITE, READ_PATH
from .report import CheckReport

__all__ = ["check_lines", "check_summary", "headline"]


def headline(r: CheckReport) -> str:
    """The verdict in one sentence."""
    paths = " and ".join(r.modes) if len(r.modes) < 3 else f"{', '.join(r.modes[:-1])} and {r.modes[-1]}"
    codes = {c.code for c in r.conclusions}
    if r.verdict == INTACT:
        what = f"intact: {_matched(r)}, and {paths} reads deliver the same bytes"
    elif r.verdict == CACHE_VERIFIED:
        what = (f"verified as the page cache delivers it: {_matched(r)} as {paths} reads deliver them; the device was "
                "not read past the page cache")
    elif r.verdict == DAMAGED and "expectations-conflict" in codes:
        what = "damaged or mislabelled: the digests published for it disagree, and its bytes are not what one says"
    elif r.verdict == DAMAGED and "device-differs" in codes:
        what = ("damaged on disk: the device holds other bytes than were published, while the page cache still held "
                "the published ones")
    elif r.verdict == DAMAGED and any(c.code.startswith("differs-from") and c.text.startswith("the bytes the page "
                                                                                               "cache")
                                      for c in r.conclusions):
        what = "damaged: the bytes the page cache delivers are not the ones published (the device was not read)"
    elif r.verdict == DAMAGED:
        what = "damaged: the file on disk is not the one published"
    elif r.verdict == NONFINITE:
        what = "the file holds NaN or Inf values as stored (the bytes are read right)"
    elif r.verdict == READ_PATH:
        what = "this machine reads the file differently depending on the read path"
    else:
        agree = not any(c.code == "read-path-differs" for c in r.conclusions)
        what = (f"unverified: no published reference, so the file can only be checked against itself; {paths} "
                "reads agree" if agree else "unverified: no published reference")
    return f"{escape_path(r.target)}: {what}{_scan_found(r)}"


def _scan_found(r: CheckReport) -> str:
    """Bytes read right can still say wrong things: the scan's findings (a chat template that runs code,
    metadata that contradicts the tensors, padding) said on the first line too, where the verdict alone
    would read as clean. A NONFINITE verdict already says what its scan found."""
    if r.verdict == NONFINITE or all(s.ok for s in r.scans):
        return ""
    kinds = list(dict.fromkeys(d.kind for s in r.scans for d in s.diagnostics()))
    return f"; but the scan found {', '.join(kinds)} findings (below)" if kinds else ""


def _matched(r: CheckReport) -> str:
    """What the intact bytes were found to match: a llama-gguf-hash manifest's lines cover the tensors' bytes
    only (not the header or the padding), so that is all that is claimed when one decided."""
    if any(c.code == "matches-manifest" and c.evidence.get("format") == "llama-gguf-hash" for c in r.conclusions):
        return "every tensor's bytes match the manifest's lines (llama-gguf-hash gives no digest of the header)"
    return "every byte matches what was published"


def check_lines(r: CheckReport) -> Iterator[str]:
    yield headline(r)
    for f in r.files:
        reads = ", ".join(f"{p.stats.mode} {plural(p.stats.bytes, 'byte')} in {p.stats.seconds:.3f} s"
                          f"{'' if p.stats.alignment == 1 else f' (alignment {p.stats.alignment})'}" for p in f.reads)
        yield f"file {escape_path(f.path)}: {reads}"
        for mode, why in f.skipped.items():
            yield f"  {mode} reads skipped: {escape_message(why)}"
    for c in r.conclusions:
        yield f"- {escape_message(c.text)}"
    for d in (d for s in r.scans for d in s.diagnostics()):
        yield from ("  " + line for line in d.lines)
    for step in r.next_steps:
        yield f"next: {escape_message(step)}"
    yield f"verdict: {r.verdict} (reference: {r.reference or 'none'}; paths compared: {', '.join(r.modes)})"


def check_summary(r: CheckReport) -> str:
    return f"check {escape_path(r.target)}: {r.verdict}"
