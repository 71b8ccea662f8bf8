"""Find NaN, Inf and outliers in every tensor of a model, at the level of stored bits, located exactly.

What is read (facts in :mod:`ggaudit.format.blocks`):

* float tensors (F32, F16, BF16, F64): every element;
* block-quantized tensors: only the float fields of each block (scales and mins), through a strided
  view, because a block decodes to ``scale x small integer (+ min)`` and so is non-finite exactly when
  one of its fields is, or its product passes FLT_MAX: the table bounds that product, so only the rare
  blocks past their type's overflow floor (Q8_K and Q8_1's f32 ``d``, MXFP4's E8M0 0xFD and 0xFE) are
  decoded, as ggml decodes them, and reported as ``overflow`` when they decode to Inf;
* integer tensors: nothing, unless the caller says an I8 tensor holds FP8 E4M3 bytes.

The core that finds and locates values is :mod:`ggaudit.scan.kernel`. Two ways to get the bytes
share it:

* mapped (large models, :mod:`ggaudit.scan.workers`): worker processes map a window of the file per
  task and read the fields in place, never copying the quantized data. A file that shrinks under a
  mapping raises SIGBUS, which kills only the worker; the broken pool becomes
  ``ReadError("file changed during scan")``.
* streamed (small models): :class:`ScanConsumer` is a chunk consumer for
  :func:`ggaudit.io.fan_out.read_through`, so a scan can share one read pass with digest consumers.
  ``scan(..., hashes=("sha256",))`` does that: each file is read once, from its first byte to its
  last, and every chunk goes both to the hashers and to the scan (each in its own thread).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import itertools
import logging
import os
import re
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..io import processes
from ..format.blocks import FP8_E4M3_ELEMENTS, GGMLQuantizationType as T, GGUFValueType, layout_of
from ..io.fan_out import Progress, read_through
from ..io.hashing import ALGORITHMS
from ..errors import NothingChecked, ReadError, UsageError, option_keywords, options_from
from ..format.layout import ArrayValue, GGUFFile, Model, Tensor
from ..stores.locate import open_model
from ..format.structure import StructureConsumer, StructureFinding, check_structure
from ..format.consistency import SPECIAL_TOKEN_KEYS, check_metadata
from ..format.metadata_finding import MetadataFinding
from .report import (CHECK_ELEMENTS, CHECK_FIELDS, CHECK_NONE, FP8_E4M3, ExpertCounts, HeaderChecks, ScaleHistogram,
                     ScanReport, ScanStats, TensorScan, WholeFileDigests)
from .histogram import histogram_of
from .kernel import Acc, Options, Plan, by_file, count_expert, deep_supported, scan_units, settle_anomalies
from .options import ScanOptions
from ..escaping import escape

if TYPE_CHECKING:   # jinja2 loads only for a model with a chat template
    from ..format.templates import TemplateFinding

__all__ = ["ScanConsumer", "ScanOptions", "ScanPlan", "add_anomalies", "deep_supported", "plan_scan", "scan"]

log = logging.getLogger(__name__)

#: Bytes per read when the calling process streams the file (small models).
STREAM_CHUNK_BYTES = 8 << 20
#: Below this much tensor data a scan reads in the calling process: starting workers costs about what they
#: save (2 cores, quantized tensors: 0.17 GB 21 ms in-process against 25 ms with two workers; 0.33 GB 50
#: against 37 ms; 1.3 GB 189 against 81 ms), and nothing is lost on a busy machine.
AUTO_WORKERS_MIN_BYTES = 256 << 20

#: Unselected bytes between two selected tensors shorter than this are read through, not skipped.
_GAP_BYTES = 1 << 20
#: The vocabulary's key: with it in the header, the tokenizer checks had something to check.
VOCABULARY = "tokenizer.ggml.tokens"

#: A mixture-of-experts tensor, as llama.cpp names them (``blk.3.ffn_down_exps.weight``, ``ffn_gate_up_exps``,
#: their ``.bias``): the experts are its last axis. Shared experts (``ffn_*_shexp``) are not split.
EXPERTS_NAME = re.compile(r"(?:^|\.)ffn_\w*_exps(?:\.|$)")

class _Stopped(Exception):
    """Raised by the streamed path to end the read at the first finding (--fail-fast)."""


# ----- the streamed path: a chunk consumer ---------------------------------------------------------

class ScanConsumer:
    """Scans the tensors of one file as its bytes stream past (``update(offset, data)``).

    Usable with :func:`ggaudit.io.fan_out.read_through` beside digest consumers, so one read pass can
    both hash a file and scan it. Chunks may cut blocks anywhere: a partial block is carried over.
    """

    def __init__(self, plans: Sequence[Plan], opts: Options,
                 advance: Callable[[int], None] | None = None) -> None:
        self._plans = sorted(plans, key=lambda p: p.offset)
        self._opts = opts
        self._advance = advance     # told the bytes newly scanned (scan() turns them into Progress)
        self.accs: dict[int, Acc] = {p.index: Acc() for p in self._plans}
        self.reached: set[int] = set()   # plans that have received bytes
        # Bytes of all plans before plan i: progress is a lookup, not a sum per chunk.
        self._before = list(itertools.accumulate((p.nbytes for p in self._plans), initial=0))
        self._i = 0
        self._done = 0               # whole units of the current plan scanned
        self._carry = bytearray()    # bytes of a unit cut by a chunk boundary

    def update(self, offset: int, data: memoryview) -> None:
        arr = np.frombuffer(data, dtype=np.uint8)
        end = offset + len(arr)
        before = self._position()
        while self._i < len(self._plans):
            plan = self._plans[self._i]
            pos = plan.offset + self._done * plan.layout.block_bytes + len(self._carry)
            if pos >= end:
                break
            if pos < offset:
                raise ReadError(plan.path, "chunks skipped bytes of a tensor", offset=pos, field=plan.name)
            self.reached.add(plan.index)
            self._feed(plan, arr[pos - offset:min(end, plan.end) - offset])
            if self.accs[plan.index].stopped:
                raise _Stopped
            if self._done == plan.units:
                self._i, self._done = self._i + 1, 0
        settle_anomalies(self.accs.values())
        if self._advance is not None:
            self._advance(self._position() - before)

    @property
    def stopped(self) -> bool:
        """--fail-fast found its finding in one of these tensors."""
        return any(a.stopped for a in self.accs.values())

    def results(self) -> dict[int, Acc]:
        """The accumulators of the tensors that were reached (--fail-fast may stop before the others)."""
        return {k: v for k, v in self.accs.items() if k in self.reached}

    def _position(self) -> int:
        """Bytes of whole units scanned so far."""
        if self._i >= len(self._plans):
            return self._before[-1]
        return self._before[self._i] + self._done * self._plans[self._i].layout.block_bytes

    def _feed(self, plan: Plan, piece: np.ndarray) -> None:
        bb = plan.layout.block_bytes
        acc = self.accs[plan.index]
        if self._carry:
            take = piece[:bb - len(self._carry)]
            self._carry += take.tobytes()
            piece = piece[len(take):]
            if len(self._carry) < bb:
                return
            scan_units(plan, self._opts, acc, np.frombuffer(bytes(self._carry), np.uint8), self._done)
            self._done += 1
            self._carry.clear()
        whole = len(piece) // bb
        if whole and not acc.stopped:
            scan_units(plan, self._opts, acc, piece[:whole * bb], self._done)
            self._done += whole
        self._carry += piece[whole * bb:].tobytes()


def _run_streamed(plans: Sequence[Plan], opts: Options, advance: Callable[[int], None]) -> dict[int, Acc]:
    accs: dict[int, Acc] = {}
    for path, group in by_file(plans).items():
        consumer = ScanConsumer(group, opts, advance)
        try:
            for start, end in _runs(group):
                read_through(path, [consumer], start=start, end=end, chunk_size=STREAM_CHUNK_BYTES,
                             threaded=False)
        except _Stopped:
            pass
        accs.update(consumer.results())
        if consumer.stopped:
            break
    return accs


@dataclasses.dataclass
class _Hashed:
    """What the one read of each whole file gave."""

    accs: dict[int, Acc] = dataclasses.field(default_factory=dict)
    digests: list[WholeFileDigests] = dataclasses.field(default_factory=list)
    structure: list[StructureFinding] = dataclasses.field(default_factory=list)


def _run_hashed(plans: Sequence[Plan], opts: Options, files: Sequence[GGUFFile], hashes: Sequence[str],
                advance: Callable[[int], None]) -> _Hashed:
    """Read each whole file once, feeding the hashers, the structure checks and the scan the same chunks.

    A file's digests are kept only when it was read to its end (--fail-fast may stop the read); the
    structure of a file the read did not finish, or never started, is checked by reads of its own.
    """
    out = _Hashed()
    groups = by_file(plans)
    stopped = False
    for f in files:
        if stopped:
            out.structure.extend(check_structure(f))
            continue
        hashers = [ALGORITHMS[name]() for name in hashes]
        structure = StructureConsumer(f)
        scanner = ScanConsumer(groups[f.path], opts, advance) if f.path in groups else None
        try:
            read_through(f.path, [*hashers, structure, *([scanner] if scanner else [])], end=f.identity.size,
                         chunk_size=STREAM_CHUNK_BYTES)
        except _Stopped:
            pass
        else:
            out.digests.append(WholeFileDigests(path=f.path, size=f.identity.size, digests={
                name: h.hexdigest() for name, h in zip(hashes, hashers, strict=True)}))
        out.structure.extend(structure.findings() if structure.complete else check_structure(f))
        if scanner is not None:
            out.accs.update(scanner.results())
            stopped = scanner.stopped
    return out


def _runs(plans: Sequence[Plan]) -> Iterator[tuple[int, int]]:
    """Byte ranges to read: neighbouring tensors together, but never a long stretch nobody asked for."""
    start, end = plans[0].offset, plans[0].end
    for p in plans[1:]:
        if p.offset - end > _GAP_BYTES:
            yield start, end
            start = p.offset
        end = max(end, p.end)
    yield start, end


# ----- the entry point ------------------------------------------------------------------------------

def select_tensors(model: Model, patterns: Collection[str] | None) -> list[Tensor]:
    """The tensors a scan covers: all, or those matching ``patterns`` (each must match one)."""
    if not patterns:
        return list(model.tensors)
    for pattern in patterns:
        if not any(fnmatch.fnmatchcase(t.name, pattern) for t in model.tensors):
            raise UsageError(model.source, f"no tensor matches {pattern!r}", field="tensors")
    return [t for t in model.tensors if any(fnmatch.fnmatchcase(t.name, p) for p in patterns)]


def fp8_names(model: Model, names: Collection[str]) -> set[str]:
    """``names`` checked to be I8 tensors of ``model`` (whose bytes are FP8 E4M3)."""
    for name in names:
        t = model.tensor(name)
        if t.ggml_type is not T.I8:
            raise UsageError(model.source, f"{escape(name)} is {t.ggml_type.name}: only an I8 tensor can hold "
                             "FP8 E4M3 bytes", field="as_fp8")
    return set(names)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ScanPlan:
    """A model ready to be read: what a scan works out before it reads a tensor's bytes, the same for a
    local scan and for ggaudit.fleet's tasks (which read its plans' byte ranges on other machines)."""

    model: Model
    options: ScanOptions
    selected: tuple[Tensor, ...]     # in model order; a report lists each
    plans: tuple[Plan, ...]          # the selected tensors that hold floats, as the readers scan them
    fp8: frozenset[str]
    warnings: tuple[str, ...]        # what is not checked as asked (deep: a type gguf.quants cannot decode)
    #: The header's findings (metadata contradicting the tensors, chat templates), found while the model's
    #: metadata is at hand: a fleet's plan travels without it.
    metadata: tuple[MetadataFinding, ...] = ()
    templates: tuple[TemplateFinding, ...] = ()
    header_checked: tuple[str, ...] = ()     # the keys whose values those checks read (header_checked)
    header_checks: HeaderChecks | None = None    # what those checks covered, counted


def plan_scan(model: Model, options: ScanOptions) -> ScanPlan:
    """Plan the scan of ``model``: the tensors selected, how each is read, and (with ``anomalies``) each
    quantized tensor's fitted scale model (a read of its scales). The files must still be the ones opened."""
    fp8 = fp8_names(model, options.as_fp8)
    selected = select_tensors(model, options.tensors)
    plans, warnings = make_plans(selected, fp8, options.deep)
    if options.anomalies:
        from .scales import fit_plans       # here: a scan without anomalies loads no scale model

        plans = fit_plans(plans)
    for f in model.files:
        f.check_unchanged("since it was opened")
    return ScanPlan(model=model, options=options, selected=tuple(selected), plans=tuple(plans),
                    fp8=frozenset(fp8), warnings=tuple(warnings), metadata=check_metadata(model, merges=options.deep),
                    templates=_templates(model), header_checked=header_checked(model),
                    header_checks=header_checks(model, merges=options.deep))


def header_checked(model: Model) -> tuple[str, ...]:
    """The header's keys whose values the metadata and template checks read, tensors or none: the
    vocabulary (``tokenizer.ggml.tokens``: its lengths, special tokens and merges are checked) and each chat
    template. A vocabulary-only file (llama.cpp ships 19) is checked by these alone. A vocabulary that is no array,
    or an empty one, gives the tokenizer checks nothing to check (they read its length): it is not counted, so such
    a file alone is nothing checked, not clean."""
    from ..format.templates import template_keys     # the keys only: jinja2 is not imported

    templates = {key for key, _ in template_keys(model)}     # those check_templates checks
    tokens = model.metadata.get(VOCABULARY)
    vocabulary = tokens is not None and isinstance(tokens.value, ArrayValue) and tokens.value.count > 0
    return tuple(k for k in model.metadata if (k == VOCABULARY and vocabulary) or k in templates)


def header_checks(model: Model, merges: bool) -> HeaderChecks:
    """What the metadata and template checks cover, counted (``merges``: each merge is looked up in the vocabulary,
    as check_metadata does with it): the keys, the vocabulary and what is checked against it, the templates."""
    from ..format.templates import template_keys

    values = model.metadata

    def array(key: str) -> ArrayValue | None:
        entry = values.get(key)
        return entry.value if entry is not None and isinstance(entry.value, ArrayValue) else None

    tokens, merge_list = array(VOCABULARY), array("tokenizer.ggml.merges")
    special = 0 if tokens is None else sum(
        1 for k in SPECIAL_TOKEN_KEYS if k in values and type(values[k].value) is int)   # as check_metadata reads them
    # As vocab_merges looks them up: both arrays of strings, some merges.
    looked_up = merges and tokens is not None and merge_list is not None and merge_list.count > 0 and \
        tokens.elem_type is merge_list.elem_type is GGUFValueType.STRING
    return HeaderChecks(metadata_keys=len(values), tokens=None if tokens is None else tokens.count,
                        special_tokens=special, merges=None if merge_list is None else merge_list.count,
                        merges_looked_up=looked_up, templates=len(template_keys(model)))


def _templates(model: Model) -> tuple[TemplateFinding, ...]:
    """The chat templates' findings; jinja2 (and the template checks) load only for a model that has one."""
    from ..format.templates import check_templates, is_template_key   # no jinja2: it loads in check_template

    if not any(is_template_key(k) for k in model.metadata):
        return ()

    return check_templates(model)


def scan(model: Model | str | os.PathLike[str], *, tensors: Collection[str] | None = None, deep: bool = False,
         max_abs: float | None = None, as_fp8: Collection[str] = (), limit: int = 16, fail_fast: bool = False,
         workers: int | None = None, hashes: Collection[str] = (), histograms: bool = False, anomalies: bool = False,
         options: ScanOptions | None = None, progress: Progress | None = None) -> ScanReport:
    """Scan a model's tensors for NaN, Inf and (with ``max_abs``) outliers.

    The options are a :class:`ggaudit.scan.options.ScanOptions` (``options=``) or its fields as these keyword
    parameters (``scan(model, deep=True, limit=5)``), not both:

    ``tensors``: glob patterns selecting tensors by name (each must match one; a str is one pattern).
    ``deep``: also decode block-quantized tensors with gguf.quants and check the decoded values.
    ``as_fp8``: names of I8 tensors that hold FP8 E4M3 bytes (a str is one name). ``limit``: findings
    listed per tensor (all are counted; an int >= 0).
    ``fail_fast``: stop at the first finding. ``workers``: reader processes (0 reads in this process; None
    picks: 0 for models under 256 MiB of tensor data or a process with one core available, else 2; within
    a :func:`ggaudit.scan.workers.reader_pool` block, scans share one pool). ``hashes``: digest
    algorithms (``"sha256"``, ``"xxh3-128"``) of each whole file, computed from the same single read as
    the scan (which then runs in this process) and returned in ``report.digests``, one entry per file
    (per shard).
    ``histograms``: also count each tensor's float fields (block scales and mins; a float tensor's
    elements) per power of two from their exponent bits, in ``TensorScan.histograms``.
    ``anomalies``: also model each quantized tensor's block scales (:mod:`ggaudit.scan.anomalies`) and
    report the blocks whose scale sits far outside what its row and position predict (kind ``anomaly``:
    likely a flipped exponent bit; likely, not certain, damage: ``verify`` against a manifest or ``diff``
    against another copy confirms it). Float tensors are not modelled.

    ``progress(done_bytes, total_bytes)`` is called as the scan advances (an observer of this call, not
    an option: one options object serves many scans).

    Whatever the tensors selected, each file's structure is checked too (``report.structure``): padding
    that is not zeros, gaps between tensors, data after the last tensor. That reads the padding and a
    bounded prefix of anything else, a few KiB for a real model.

    Raises:
        UsageError: an option of the wrong type or value (``limit="5"``), both ``options`` and keywords, a
            pattern of ``tensors`` that matches no tensor, a name of no known store. Its subclass
            NothingChecked: a model that holds no tensor, vocabulary or chat template.
        FormatError: a file that is no well-formed GGUF or split set (naming the offset and the field).
        ReadError: a file that cannot be opened or read, or that changed while it was scanned. One the OS
            refused is also the standard exception of that error (``FileNotFoundError``, ``PermissionError``,
            else ``OSError``, with ``errno``, ``strerror`` and ``filename``).
        ManifestError: what a store says of the name (an Ollama manifest, a snapshot) is missing, malformed
            or unsafe; a missing one is also a ``FileNotFoundError`` where the OS said so.
    """
    opts = options_from(ScanOptions, options, option_keywords(ScanOptions, locals()))
    if progress is not None and not callable(progress):
        raise UsageError(None, f"must be callable or None, not {type(progress).__name__}", field="progress")
    m = model if isinstance(model, Model) else open_model(model)
    plan = plan_scan(m, opts)
    hashes = tuple(opts.hashes)
    total = sum(p.nbytes for p in plan.plans)
    n_workers = 0 if hashes else _workers(opts.workers, total)
    done = 0

    def advance(n: int) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress(done, total)

    started = time.perf_counter()
    kernel_opts = opts.kernel
    digests: list[WholeFileDigests] = []
    if hashes:
        hashed = _run_hashed(plan.plans, kernel_opts, m.files, hashes, advance)
        accs, digests = hashed.accs, hashed.digests
        structure = tuple(hashed.structure)
    else:
        structure = tuple(finding for f in m.files for finding in check_structure(f))
        accs = _run_mapped(plan.plans, kernel_opts, m.files, n_workers, advance) if n_workers else \
            _run_streamed(plan.plans, kernel_opts, advance)
    for f in m.files:
        f.check_unchanged("during scan")
    stats = ScanStats(bytes=total, seconds=time.perf_counter() - started, workers=n_workers)
    report = report_of(plan, accs, stats, structure)
    if not hashes:
        return report
    unhashed = len(m.files) - len(digests)
    extra = (f"stopped at the first finding (fail_fast): no digests for {unhashed} of {len(m.files)} files",)
    return dataclasses.replace(report, hashes=hashes, digests=tuple(digests),
                               warnings=report.warnings + (extra if unhashed else ()))


def report_of(plan: ScanPlan, accs: dict[int, Acc], stats: ScanStats,
              structure: tuple[StructureFinding, ...]) -> ScanReport:
    """The report of a planned scan from its plans' merged accumulators, however they were read (in this
    process, by reader processes, on a fleet): anomalies are decided here, reading their blocks again."""
    opts = plan.options.kernel
    warnings = list(plan.warnings)
    if plan.options.anomalies:
        warnings += add_anomalies(plan.plans, accs, opts)
    return build_report(plan.model, plan.selected, plan.plans, accs, set(plan.fp8), warnings, opts, stats,
                        structure, header=(plan.metadata, plan.templates), header_checked=plan.header_checked,
                        header_checks=plan.header_checks)


def add_anomalies(plans: Sequence[Plan], accs: dict[int, Acc], opts: Options) -> list[str]:
    """Fold each scanned tensor's anomalies into its accumulator (counted, listed up to the limit);
    returns the warnings. Nothing when --fail-fast stopped the scan (its rows were not all scored)."""
    if any(a.stopped for a in accs.values()):
        return []
    from .scales import anomaly_findings

    settle_anomalies(accs.values())
    warnings: list[str] = []
    for plan in plans:
        acc = accs.get(plan.index)
        if acc is None or plan.anomaly is None:
            continue
        found, more = anomaly_findings(plan, acc)
        warnings.extend(more)
        acc.counts["anomaly"] += len(found)
        acc.findings.extend(found[:max(0, (1 if opts.fail_fast else opts.limit) - len(acc.findings))])
        for f in found:
            if f.expert is not None:
                count_expert(acc.experts, f.expert, "anomaly")
    return warnings


def _run_mapped(plans: Sequence[Plan], opts: Options, files: Sequence[GGUFFile], workers: int,
                advance: Callable[[int], None]) -> dict[int, Acc]:
    # Imported here: a model under AUTO_WORKERS_MIN_BYTES is read in this process, without multiprocessing.
    from .workers import run_mapped

    return run_mapped(plans, opts, files, workers, advance)


def _workers(workers: int | None, total: int) -> int:
    if workers is not None:
        return workers
    cores = processes.available_cores()
    # One worker on one core only adds a process between the file and the scan.
    return min(2, cores) if total >= AUTO_WORKERS_MIN_BYTES and cores > 1 else 0


def make_plans(selected: Sequence[Tensor], fp8: set[str], deep: bool) -> tuple[list[Plan], list[str]]:
    """How each selected tensor is scanned (the fields of its units), and warnings for what is not checked.
    Plans are what the in-process scan, reader processes and ggaudit.fleet's tasks run."""
    plans: list[Plan] = []
    undecodable: dict[str, int] = {}
    for index, t in enumerate(selected):
        layout = FP8_E4M3_ELEMENTS if t.name in fp8 else layout_of(t.ggml_type)
        if layout.is_integer:
            continue
        blockwise = not layout.is_float_elements
        decode = deep and blockwise and deep_supported(t.ggml_type)
        if deep and blockwise and not decode:
            undecodable[t.ggml_type.name] = undecodable.get(t.ggml_type.name, 0) + 1
        plans.append(Plan(index, t.name, t.path, t.offset, t.nbytes, t.n_cols, layout, decode, _rows_per_expert(t)))
    warnings = [f"deep: gguf.quants cannot decode {name}; {n} tensor{'s' if n > 1 else ''} of that type "
                "checked by block fields only" for name, n in sorted(undecodable.items())]
    return plans, warnings


def _rows_per_expert(t: Tensor) -> int:
    """Rows of one expert when ``t`` is a mixture-of-experts tensor (2-D or 3-D), else 0."""
    if len(t.shape) not in (2, 3) or not EXPERTS_NAME.search(t.name):
        return 0
    return t.n_rows // t.shape[-1]


def _experts(t: Tensor, acc: Acc, kinds: tuple[str, ...]) -> dict[str, Any]:
    """The TensorScan fields of a mixture-of-experts tensor: its expert count and its experts' findings."""
    if not _rows_per_expert(t):
        return {}
    found = tuple(ExpertCounts(expert=e, counts={k: acc.experts[e].get(k, 0) for k in kinds})
                  for e in sorted(acc.experts))
    return {"n_experts": t.shape[-1], "experts": found}


def _histograms(plan: Plan | None, acc: Acc) -> tuple[ScaleHistogram, ...] | None:
    """Each float field's histogram, in block order; None for a tensor with no float field (integers)."""
    if plan is None:
        return None
    return tuple(histogram_of(f, acc.scales[f.name]) if f.name in acc.scales else
                 ScaleHistogram(field=f.name, encoding=f.encoding.value, powers=()) for f in plan.layout.fields)


def build_report(model: Model, selected: Sequence[Tensor], plans: Sequence[Plan], accs: dict[int, Acc],
                 fp8: set[str], warnings: list[str], opts: Options, stats: ScanStats,
                 structure: tuple[StructureFinding, ...] = (),
                 header: tuple[tuple[MetadataFinding, ...], tuple[TemplateFinding, ...]] = ((), ()),
                 header_checked: tuple[str, ...] = (), header_checks: HeaderChecks | None = None) -> ScanReport:
    """The report of a scan from its plans' merged accumulators (however they were read), the structure
    findings of its files and its header's (metadata, templates; ``header_checked``: the keys checked;
    ``header_checks``: what those checks covered, counted)."""
    by_index = {p.index: p for p in plans}
    out: list[TensorScan] = []
    stopped = any(a.stopped for a in accs.values())
    for index, t in enumerate(selected):
        plan = by_index.get(index)
        acc = accs.get(index)
        if plan is not None and acc is None:
            continue          # never reached: --fail-fast stopped before it
        acc = acc or Acc()
        check = CHECK_NONE if plan is None else CHECK_ELEMENTS if plan.layout.is_float_elements else CHECK_FIELDS
        out.append(TensorScan(name=t.name, type=t.ggml_type.name, shape=t.shape, path=t.path, offset=t.offset,
                              nbytes=t.nbytes, check=check, counts={k: acc.counts[k] for k in opts.kinds},
                              max_abs=acc.max_abs,
                              findings=tuple(acc.findings), encoding=FP8_E4M3 if t.name in fp8 else None,
                              deep=bool(plan and plan.deep), complete=not acc.stopped,
                              **_experts(t, acc, opts.kinds),
                              histograms=_histograms(plan, acc) if opts.histograms else None))
    if stopped:
        skipped = sum(1 for p in plans if p.index not in accs)
        warnings = [*warnings, f"fail_fast: stopped at the first finding; {skipped} tensors not scanned"]
    report = ScanReport(model=model.source, files=tuple(f.path for f in model.files), tensors=tuple(out),
                        warnings=tuple(warnings), complete=not stopped, max_abs=opts.max_abs, stats=stats,
                        anomalies=opts.anomalies, structure=structure, metadata=header[0], templates=header[1],
                        header_checked=header_checked, header_checks=header_checks)
    if not report.tensors and report.ok and not header_checked:
        # No value was scanned, no vocabulary or template was checked, and nothing is wrong with the
        # structure: that is never a clean result.
        raise NothingChecked(model.source, "holds no tensor, vocabulary or chat template; nothing was checked")
    return report
