"""Every kind of finding ggaudit reports, in one registry: its id, how bad it is, and in words what it is,
what it means and what to do about it.

A report's :class:`~ggaudit.diagnostic.Diagnostic` names its kind by id. Scan's ids are the finding kinds
themselves (``nan``, ``+inf``, ``-inf``, ``outlier``, ``anomaly``), the structure kinds (``padding``,
``gap``, ``trailing``) and the header's (``metadata``, ``template``); the other jobs' are prefixed with the job
(``verify/sha256``, ``rows/short-read``,
``diff/structure``). The SARIF reporter's rules are this table; ``--fail-on`` selects by id, family
(:data:`FAMILIES`) and severity. The bottom layer: nothing here imports a job, so every job and reporter can
use it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ADVISORY", "ERROR", "FAMILIES", "KINDS", "NOTE", "SEVERITIES", "WARNING", "Kind", "fails_by_default",
           "family", "kind", "selects"]

#: How bad a kind is, worst first (SARIF's levels).
ERROR, WARNING, NOTE = "error", "warning", "note"
SEVERITIES = (ERROR, WARNING, NOTE)

_REFETCH = ("Get the file again from its source and compare its sha256 with the publisher's; if the source "
            "holds it too, re-convert or re-quantize from the original weights and tell the publisher.")


@dataclass(frozen=True, kw_only=True)
class Kind:
    """A kind of finding: ``title`` (one line), ``meaning`` (what it says about the file or the read path)
    and ``action`` (what to do; SARIF's help)."""

    id: str
    severity: str
    title: str
    meaning: str
    action: str


def _kinds(*kinds: Kind) -> dict[str, Kind]:
    return {k.id: k for k in kinds}


_DOWNLOAD = "The file is damaged or is not the one expected: download it again and verify again."
_ANOTHER = "The file is another model, or another version of it: check the manifest belongs to it."

#: Every kind, by id, in the order the reports meet them.
KINDS = _kinds(
    Kind(id="nan", severity=ERROR, title="A NaN stored in a tensor",
         meaning="An element, or a block's float field (its scale), holds NaN bits in the file.",
         action="A NaN weight or block scale makes everything computed from it NaN. " + _REFETCH),
    Kind(id="+inf", severity=ERROR, title="A +Inf stored in a tensor",
         meaning="An element or a block's float field is +Inf, or a finite scale decodes past the largest float.",
         action="An infinite weight or block scale makes everything computed from it Inf or NaN. " + _REFETCH),
    Kind(id="-inf", severity=ERROR, title="A -Inf stored in a tensor",
         meaning="An element or a block's float field is -Inf, or a finite scale decodes past the largest float.",
         action="An infinite weight or block scale makes everything computed from it Inf or NaN. " + _REFETCH),
    Kind(id="outlier", severity=WARNING, title="A value or block scale larger than --max-abs",
         meaning="A finite value whose magnitude is above the threshold asked for (scan --max-abs).",
         action="Compare it with the tensor's largest finite |x| and with the original weights: a single huge "
                "scale is usually a damaged or badly quantized block; if such values are expected, raise "
                "--max-abs."),
    Kind(id="anomaly", severity=WARNING,
         title="A block scale far outside what its tensor's other scales predict (--anomalies)",
         meaning="A finite block scale many robust spreads away from the scale its row and position predict.",
         action="Likely, not certainly, a flipped exponent bit: check the file with `ggaudit verify` against a "
                "manifest made while it was known good, or compare it with another copy (`ggaudit diff`); if "
                "either confirms it, " + _REFETCH[0].lower() + _REFETCH[1:]),
    Kind(id="padding", severity=WARNING, title="Alignment padding that is not zeros",
         meaning="A byte of the padding before a tensor's aligned start is not zero.",
         action="GGUF padding must be zeros: the file was written by a faulty tool or changed afterwards. "
                + _REFETCH),
    Kind(id="gap", severity=WARNING, title="Bytes between tensors that no tensor owns",
         meaning="More bytes lie between two tensors (or before the first) than the alignment needs.",
         action="A writer leaves no gaps beyond the alignment: find out what the bytes are. " + _REFETCH),
    Kind(id="trailing", severity=ERROR, title="Data after the last tensor",
         meaning="The file goes on past the last tensor and its zero padding: a payload appended to a model.",
         action="Bytes appended to a model load and run unnoticed: find out what they are and where they came "
                "from, and use a copy without them. " + _REFETCH),
    Kind(id="metadata", severity=ERROR, title="Metadata that contradicts the tensors or the vocabulary",
         meaning="An error: a header key (block count, a required tensor, a head count or width, rope dimensions, "
                 "experts, a per-layer array, the vocabulary's lengths) says something llama.cpp's loader refuses, "
                 "or its first decode aborts on. A warning: something it accepts but misreads or works around (a "
                 "special token out of range, vocab_size, context_length 0, merges naming unknown tokens, a file "
                 "type no tensor uses).",
         action="llama.cpp's loader refuses such a file (\"wrong shape\", \"missing tensor\") or aborts at the "
                "first token: re-convert the model from its original weights with a current converter, or get the "
                "file again from a publisher whose file loads. For a warning, the file loads: trust the tensors "
                "and the vocabulary over the key, and tell the publisher."),
    Kind(id="template", severity=ERROR, title="A chat template that runs code, is refused, or hides content",
         meaning="An error: the embedded Jinja chat template reaches Python internals (a name starting with _, "
                 "self, cycler, ..., also by a name it builds while it runs, str.format or a dotted attribute "
                 "path), tried such a thing when rendered in a sandbox, does not finish within a budget, loads "
                 "other templates, or does not parse. A warning (advice: it fails a run only with --fail-on): "
                 "it holds invisible characters, a blob, a URL, homoglyphs, instructions to the model, or text "
                 "it adds only when a message holds a keyword. A note: a filter or test no known engine provides.",
         action="Do not load the model with an engine that renders templates with jinja2 (llama-cpp-python "
                "before 0.2.72: CVE-2024-34359) until the template is replaced: pass your own chat template "
                "(--chat-template, chat_format=) or remove tokenizer.chat_template; for a warning, read the "
                "template at the line and column shown and decide whether the hidden text belongs there."),
    Kind(id="verify/missing", severity=ERROR, title="A file the manifest lists is missing",
         meaning="The manifest, store or sums file names a file that is not there.",
         action="Download or restore the file, then verify again."),
    Kind(id="verify/not-a-file", severity=ERROR, title="A path the manifest lists is not a regular file",
         meaning="The path exists but is a folder, a device or another special file.",
         action="Replace it with the file itself, then verify again."),
    Kind(id="verify/size", severity=ERROR, title="A file's size differs from the expected one",
         meaning="The file holds more or fewer bytes than its expectation says.",
         action="The file is truncated, grew, or is another file: download it again and verify again."),
    Kind(id="verify/sha256", severity=ERROR, title="A file's sha256 differs from the expected one",
         meaning="Every byte of the file was read and its sha256 is not the published or recorded one.",
         action=_DOWNLOAD),
    Kind(id="verify/git-sha1", severity=ERROR, title="A file's git blob SHA-1 differs from the expected one",
         meaning="The file's git blob SHA-1 (as Hugging Face lists small files) is not the recorded one.",
         action=_DOWNLOAD),
    Kind(id="verify/md5", severity=ERROR, title="A file's MD5 differs from the expected one",
         meaning="The file's MD5 (as GPT4All's model list gives it) is not the listed one.",
         action=_DOWNLOAD),
    Kind(id="verify/link", severity=ERROR,
         title="A link that is not followed (dangling, a loop, or pointing out of its folder or store)",
         meaning="A symbolic link where a file was expected; ggaudit opens nothing outside a store or folder.",
         action="Replace the link with the file it should name, or remove it."),
    Kind(id="verify/header", severity=ERROR, title="A file that no longer parses as GGUF",
         meaning="The file's GGUF header could not be read: its tensors could not be checked.",
         action="Its header is damaged: download it again and verify again."),
    Kind(id="verify/orphan", severity=WARNING, title="A blob no model of the store references",
         meaning="A blob of an Ollama store that no manifest names.",
         action="Left over from a removed model or an interrupted pull: remove it once no model needs it."),
    Kind(id="verify/tensor-data", severity=ERROR, title="A tensor's data differs from the manifest's digest",
         meaning="The digest of a group of a tensor's rows is not the manifest's: those rows changed.",
         action="The rows shown changed: download the file again, or compare it with a good copy (ggaudit diff) "
                "to see the bytes."),
    Kind(id="verify/tensor-missing", severity=ERROR, title="A tensor the manifest lists is not in the file",
         meaning="The manifest names a tensor the model does not hold.", action=_ANOTHER),
    Kind(id="verify/file-extra", severity=ERROR,
         title="A file of the model (a shard, a projector) that the manifest does not list",
         meaning="A file of the model that no expectation covers: it was not checked.",
         action="Nothing says what the file should hold, so it was not checked: make the manifest from the "
                "whole model (every shard, the projector), or check the manifest belongs to this model."),
    Kind(id="verify/tensor-extra", severity=ERROR, title="A tensor in the file that the manifest does not list",
         meaning="The model holds a tensor the manifest does not name: it was not checked.", action=_ANOTHER),
    Kind(id="verify/tensor-layout", severity=ERROR, title="A tensor's type, shape or rows differ from the manifest's",
         meaning="The tensor is there but stored with another type or shape than the manifest's.",
         action="The file is another conversion or quantization: check the manifest belongs to it."),
    Kind(id="verify/model-data", severity=ERROR,
         title="The digest of all of a file's tensor data differs (llama-gguf-hash)",
         meaning="llama-gguf-hash's digest of every tensor's data of a file is not the manifest's.",
         action="Some tensor's data changed: verify with a per-tensor manifest to find which, or download "
                "again."),
    Kind(id="verify/structure", severity=ERROR, title="Bytes of the file that no tensor owns should not be there",
         meaning="Padding that is not zeros, a gap or data after the last tensor, in a file whose tensors match.",
         action="Digests of tensor data cannot see these bytes (padding, gaps, data after the last tensor): find "
                "out what they are. " + _REFETCH),
    Kind(id="rows/short-read", severity=ERROR, title="A read path delivered a row cut short",
         meaning="The row's bytes end early: the rest of the buffer still holds the poison it was filled with.",
         action="The read path (or the filesystem under it) returns fewer bytes than asked: do not load the model "
                "through this path until it is fixed."),
    Kind(id="rows/filled", severity=ERROR, title="A read path delivered whole sectors of one repeated byte",
         meaning="A read that returned its full count delivered zeros (or another byte, such as 0xff) over whole "
                 "sectors: ggaudit's buffers hold 0xa5 before a read, so the fill came from below the read path.",
         action="Something under the read path (the device, a VM disk, a storage or filter layer) fills sectors "
                "it did not read: check the device and the layers under the file, then read again."),
    Kind(id="rows/stale", severity=ERROR, title="A read path delivered a row holding a previous read's bytes",
         meaning="The row's buffer holds the row read before it: a reused buffer was not filled.",
         action="A reused buffer was not filled: the read path is faulty, do not load the model through it."),
    Kind(id="rows/misplaced", severity=ERROR, title="A read path delivered another row's bytes",
         meaning="The row's bytes are another row's (or a shifted copy): the read came from the wrong offset.",
         action="A read came from the wrong offset (alignment arithmetic): the read path is faulty."),
    Kind(id="rows/cache-crosstalk", severity=ERROR, title="A row cache returned another row's bytes",
         meaning="A cache hit returned the bytes of another row than the one asked for.",
         action="The cache in front of the reads mixes up entries: fix or disable it."),
    Kind(id="rows/garbage", severity=ERROR, title="A read path delivered bytes that are in no row",
         meaning="The bytes delivered match neither the row, nor its neighbours, nor a previous read.",
         action="The read path or the storage under it corrupts data: check the device and the read path."),
    Kind(id="rows/unclassified", severity=ERROR,
         title="A read path delivered a wrong row (not classified: past the mismatches kept)",
         meaning="A row differs from the file; the mismatches kept are full, so it was counted, not classified.",
         action="See the classified mismatches of the same read path for the kind of fault."),
    Kind(id="rows/incomplete-read", severity=ERROR,
         title="A read returned fewer bytes than asked, not at the end of the file",
         meaning="One read call returned less than asked although the file goes on.",
         action="The read path treats a short read as complete: it must read again until it has every byte."),
    Kind(id="rows/unstable-read", severity=ERROR,
         title="Two reference reads of the same rows delivered different bytes",
         meaning="A buffered reference read of rows delivered other bytes than the first read of the same rows (their "
                 "digests differ): reads through the page cache are not stable on this machine.",
         action="Something between the disk and the process changes bytes (RAM, a filter driver, a VM or storage "
                "layer): run `ggaudit check` on the file and test the machine's memory and storage."),
    Kind(id="rows/read-error", severity=ERROR, title="A read of a read path failed (EIO, EAGAIN, a mapping's copy)",
         meaning="One read of the file on this path failed with an error from below; its rows were not compared "
                 "on that path, and the other reads and paths went on.",
         action="The device or a layer under the file failed the read: check the device (dmesg, SMART) and read "
                "again; if it persists, do not load the model through this path."),
    Kind(id="rows/nonfinite", severity=ERROR, title="Rows of the table decode to NaN or Inf",
         meaning="The selected rows' bytes as tested (the bytes a published digest or manifest decided, else the "
                 "reference read's) decode to NaN or Inf.",
         action="Where the bytes were decided, the file is damaged: " + _REFETCH + " Where the report says "
                "nothing decided, replay the rows with the file's published sha256 (rows --sha256) first."),
    Kind(id="diff/data", severity=WARNING, title="A tensor's data differs between the two models",
         meaning="A tensor of the same name, type and shape holds other bytes in B than in A.",
         action="Expected when one is a fine-tune or another quantization; otherwise the one that changed is "
                "damaged: scan both, and verify each against its source."),
    Kind(id="diff/layout", severity=WARNING, title="A tensor's type or shape differs between the two models",
         meaning="A tensor of the same name is stored with another type or shape in B.",
         action="The two models are different conversions or quantizations: compare like with like."),
    Kind(id="diff/only-in-a", severity=WARNING, title="A tensor only in model A",
         meaning="Model A holds a tensor of a name model B does not.",
         action="The models differ in architecture or conversion, or B lost a tensor: check B's source."),
    Kind(id="diff/only-in-b", severity=WARNING, title="A tensor only in model B",
         meaning="Model B holds a tensor of a name model A does not.",
         action="The models differ in architecture or conversion, or B gained a tensor: check B's source."),
    Kind(id="diff/metadata", severity=WARNING, title="A metadata key differs between the two models",
         meaning="A metadata key is in one model only, or has another type or value in B.",
         action="Check the key matters (the tokenizer, rope and context settings do): a wrong value changes the "
                "model's output without any damaged weight."),
    Kind(id="diff/structure", severity=ERROR,
         title="Bytes no tensor owns (padding, gaps, data after the last tensor), or the file's alignment, data "
               "offset or size, differ between the two files",
         meaning="The bytes outside the tensors, or the file facts (alignment, data offset, size), differ.",
         action="Tensor and metadata comparisons cannot see these bytes: find out what they are (`ggaudit scan` "
                "flags them in each file) and use the copy without them. " + _REFETCH),
    Kind(id="check/differs-from-published", severity=ERROR, title="The file on disk is not the one published",
         meaning="Every byte was read and no read path delivered the bytes the published digest describes.",
         action="The download is damaged or is another file: download it again (for Ollama, remove the blob "
                "first: a pull keeps a blob that is already there) and check again."),
    Kind(id="check/differs-from-manifest", severity=ERROR, title="The file differs from its tensor manifest",
         meaning="The file's bytes are not those of the manifest made where the model was known good.",
         action="The rows shown changed since the manifest was made: get the file again, or copy it from the "
                "machine the manifest was made on."),
    Kind(id="check/read-path-differs", severity=ERROR,
         title="A read path delivers other bytes than the others on this machine",
         meaning="Reading the same file through buffered reads, a memory mapping or direct I/O gave different bytes.",
         action="Avoid the path that deviates (an engine's mmap or direct-I/O option) and report it to the maker of "
                "the storage, filesystem, filter driver or VM layer; test the RAM when the page cache deviates."),
    Kind(id="check/nonfinite-delivered", severity=ERROR,
         title="A read path delivered a NaN or Inf in bytes it reads differently from the other paths",
         meaning="The scan of the bytes one read path delivered found a non-finite value in a tensor that path "
                 "reads differently on this machine: it shows what that path delivered, not what the file holds "
                 "(the file's bytes there, read through a right path, are finite; or, nothing deciding, which "
                 "bytes are the file's is not known).",
         action="Do not download the file again for it: an engine reading through that path computes NaN from "
                "bytes the file does not hold. Replay the rows through each path (`ggaudit rows MODEL --tensor "
                "NAME --ids ROWS`), load the model through a path that reads right (llama.cpp: `--load-mode`; "
                "Ollama: the option `use_mmap`), and report the path's fault to the maker of the storage, "
                "filesystem, filter driver or VM layer."),
    Kind(id="check/manifest-differs-from-published", severity=WARNING,
         title="The manifest was made from another file than the published one",
         meaning="The tensor manifest's sha256 of the file is not the published digest.",
         action="Make the manifest again from a copy that matches the published digest."),
    Kind(id="check/expectations-conflict", severity=ERROR,
         title="Two sources give the file two different digests",
         meaning="The store, a checksum file, --sha256 or a manifest disagree about this one file: at most one of "
                 "them describes it.",
         action="Find out which source is the publisher's (the repository's own listing) and correct or drop "
                "the other."),
    Kind(id="check/device-differs", severity=ERROR,
         title="The device holds other bytes than the page cache, which held the published ones",
         meaning="Direct reads and a read through the page cache once its pages were evicted agree on bytes "
                 "that are not the published ones, while the page cache held the published bytes: a write that "
                 "never reached the disk, a torn write, or media damage under a cached file.",
         action="Copy the file now, before a reboot empties the page cache, and check the copy; check the disk "
                "(its SMART log, the filesystem) and download the file again."),
    Kind(id="check/not-compared", severity=ERROR,
         title="A read path's bytes could not be compared with what was published",
         meaning="A path delivered other bytes than the paths compared with the published digest, and a second "
                 "read of it to hash them failed or delivered other bytes again.",
         action="Run the check again; if the path's bytes keep changing, that read path is unstable here."),
    Kind(id="check/plan-read-differs", severity=ERROR,
         title="The read the check was planned from delivered other bytes of the header",
         meaning="The header was parsed from one read, and the passes over the file delivered other bytes there "
                 "(or the first read could not be parsed and another path's could): that read was wrong. The "
                 "check was planned again from the bytes the passes decided.",
         action="A read of this machine delivered wrong bytes once: run the check again; if it recurs, treat it as "
                "a read-path fault (the storage, filesystem, filter driver or RAM)."),
    Kind(id="check/store-problem", severity=ERROR,
         title="The store says something is wrong with the file before it is read",
         meaning="The store's own record of the file is broken (a blob whose name is no digest, an interrupted "
                 "download, a link leaving the store), as verify reports it: nothing published can decide it.",
         action="Download the file again through the store's own tool, then check again."),
    Kind(id="check/file-extra", severity=ERROR, title="The manifest gives a file of the target no entry",
         meaning="A file of the target (a shard, a projector) is not in the manifest: its bytes were compared with "
                 "nothing it says.",
         action="Make the manifest from every file of the model where it works (`ggaudit manifest`)."),
    Kind(id="check/path-skipped", severity=WARNING, title="A read path could not be used on this file",
         meaning="The filesystem refuses direct I/O (or the platform has none): the other paths were compared.",
         action="Copy the file to a filesystem that supports direct I/O to compare the device's bytes too."),
    Kind(id="check/no-published-reference", severity=NOTE, title="Nothing published says what the file should be",
         meaning="No store digest, checksum file, --sha256 or manifest: the file was checked against itself only.",
         action="Give --sha256, --sums or --manifest (made with `ggaudit manifest` where the model works)."),
)


#: ``--fail-on``'s families: the kinds that mean one thing to a CI, by id or by the id's first part (``rows``:
#: every ``rows/...``). A kind is in the first family that names it (``rows/nonfinite`` is ``nonfinite``),
#: and every kind is in one (tests/test_one_run_every_output.py walks KINDS).
FAMILIES: dict[str, tuple[str, ...]] = {
    "nonfinite": ("nan", "+inf", "-inf", "rows/nonfinite"),
    "outlier": ("outlier",),
    "anomaly": ("anomaly",),
    "structure": ("padding", "gap", "trailing", "verify/structure", "verify/header", "diff/structure"),
    "read-path": ("rows", "check/read-path-differs", "check/nonfinite-delivered", "check/path-skipped",
                  "check/not-compared", "check/plan-read-differs"),
    "digest": ("verify", "check"),
    "metadata": ("metadata",),
    "template": ("template",),
    "diff": ("diff",),
}


def family(kind_id: str) -> str | None:
    """The family (:data:`FAMILIES`) of the kind ``kind_id``; None for an id no family names."""
    head = kind_id.split("/", 1)[0]
    return next((name for name, ids in FAMILIES.items() if kind_id in ids or head in ids), None)


#: The families whose warnings and notes are advice: reported, but a run fails on them only when ``--fail-on``
#: selects them (``template``: a URL or a hidden character may belong in a template; a person decides). Their
#: errors fail a run as every error does.
ADVISORY = frozenset(("template",))


def selects(names: frozenset[str], kind_id: str, severity: str) -> bool:
    """Whether ``--fail-on names`` (kinds' ids, families, severities) selects a finding of that kind. A note
    is selected by its family only in an advisory family (a template's note is advice on the template): any
    other note says what a report could not do (nothing published to compare with), no finding of its family,
    so ``--fail-on digest`` does not fail a run whose only digest kind is the note that nothing was published;
    its id or ``note`` selects it."""
    by_family = family(kind_id) in names and (severity != NOTE or family(kind_id) in ADVISORY)
    return kind_id in names or severity in names or by_family


def fails_by_default(kind_id: str, severity: str) -> bool:
    """Whether a finding of that kind and severity fails a run without ``--fail-on`` (and makes its report
    not ``ok``): every finding but an advisory family's warnings and notes (:data:`ADVISORY`)."""
    return severity == ERROR or family(kind_id) not in ADVISORY


def kind(kind_id: str) -> Kind:
    """The kind of that id; a KeyError naming it for an id not registered (every report's kinds are: a test
    walks them)."""
    try:
        return KINDS[kind_id]
    except KeyError:
        raise KeyError(f"finding kind {kind_id!r} is not in ggaudit.kinds.KINDS") from None
