"""A model against a manifest, either format, told apart by content: ggaudit's tensor manifest
(:mod:`ggaudit.verify.walk.tensors`) or llama.cpp's ``llama-gguf-hash`` lines, checked here: matched by
tensor name, each tensor's and each model line's digest compared."""

from __future__ import annotations

import os
from collections.abc import Sequence

from ...errors import FormatError, NothingChecked
from ...format.layout import GGUFFile, Model, open_model
from ...io.fan_out import Progress
from ..cache import DigestCache
from ..collect import Collector, absent, finish, structure_mismatches
from ..compare import Facts, compare_facts, compare_maps
from ..manifests.llama_hash import FORMAT as LLAMA_HASH
from ..manifests.llama_hash import (FileHashes, FilePlan, HashEntry, hash_gguf_file, manifest_format, plan_llama_check,
                                    read_llama_hash, tensor_data_span)
from ..report import Checked, Mismatch, VerifyReport
from .tensors import verify_tensor_manifest


def verify_manifest(model: str | os.PathLike[str] | Model, manifest_path: str | os.PathLike[str], *,
                    also: Sequence[str | os.PathLike[str]] = (), fail_fast: bool = False,
                    progress: Progress | None = None, digest_cache: DigestCache | None = None) -> VerifyReport:
    """Check a model against a manifest in either format, told apart by its content: ggaudit's tensor
    manifest (JSON) or llama.cpp's ``llama-gguf-hash`` lines. ``also``: more files of the model (an Ollama
    model's projector), matched by file name (tensor manifest) or by tensor name (llama format). Either
    way, what of the model the manifest does not name is a mismatch, and a manifest naming nothing of it
    is NothingChecked."""
    if manifest_format(manifest_path) == LLAMA_HASH:
        return verify_llama_hash([model, *also], manifest_path, fail_fast=fail_fast, progress=progress,
                                 digest_cache=digest_cache)
    if isinstance(model, Model):
        return verify_tensor_manifest(model.source, manifest_path, also=[*(f.path for f in model.files), *also],
                                      fail_fast=fail_fast, progress=progress, digest_cache=digest_cache)
    return verify_tensor_manifest(model, manifest_path, also=also, fail_fast=fail_fast, progress=progress,
                                  digest_cache=digest_cache)


def verify_llama_hash(models: Sequence[str | os.PathLike[str] | Model], manifest_path: str | os.PathLike[str],
                      *, fail_fast: bool = False, progress: Progress | None = None,
                      digest_cache: DigestCache | None = None) -> VerifyReport:
    """Check a model against llama.cpp's manifest format (``llama-gguf-hash``), one read per file.

    ``models``: the model's files (a path opens a whole split set) or opened Models. Lines are matched by
    tensor name, whatever path the manifest was made with (see :func:`plan_llama_check`); for each tensor
    and each model line the strongest type given is checked. Reports each tensor whose digest differs
    (its file span), a model line's digest of all tensor data that differs, tensors the manifest names
    that the model lacks and the reverse, a file of the model no line names (``file-extra``), and a model
    file absent or no longer GGUF. A manifest no line of which names a tensor or a file of the model is
    NothingChecked.
    """
    entries = read_llama_hash(manifest_path)
    out = Collector(fail_fast, digest_cache, progress=progress)
    first = models[0] if models else ""
    source = first.source if isinstance(first, Model) else os.fspath(first)
    files = _open_llama_targets(models, out)
    if files is None:
        return finish(out, source, "llama-gguf-hash", empty="no file of the model opened")
    plan = plan_llama_check(entries, files, manifest_path)
    if not any(p.named for p in plan.files):
        raise NothingChecked(manifest_path, f"names nothing of {source}: no line names a tensor or a file of it; "
                             "nothing was checked")
    out.tally.plan(sum(tensor_data_span(p.file) for p in plan.files if p.named))
    out.mismatches.extend(
        Mismatch(kind="tensor-missing", path=source if home is None else home.path, subject=tensor, expected=e.hex,
                 tensor=tensor, detail=f"tensor in the manifest (line {e.line}), not in the model")
        for e, tensor, home in plan.missing)
    out.tensors = out.tensors_differing = len(plan.missing)
    out.mismatches.extend(
        Mismatch(kind="missing", path=source, subject=e.name, expected=e.hex,
                 detail=f"no file of the model has this model line's tensors or name (line {e.line})")
        for e in plan.unmatched)
    for file_plan in plan.files:
        if out.full:
            break
        _check_llama_file(file_plan, out)
    return finish(out, source, "llama-gguf-hash", empty="no line of the manifest was checked")


def _open_llama_targets(models: Sequence[str | os.PathLike[str] | Model], out: Collector) -> list[GGUFFile] | None:
    """The files of every model given, each once; None (and why, as a mismatch) if one is absent or unreadable."""
    files: dict[str, GGUFFile] = {}
    for model in models:
        if not isinstance(model, Model):
            path = os.fspath(model)
            if absent(path):
                out.mismatches.append(Mismatch(kind="missing", path=path, subject=os.path.basename(path),
                                               detail="model file not found"))
                return None
            try:
                model = open_model(path)
            except FormatError as err:
                out.mismatches.append(Mismatch(kind="header", path=err.path or path, subject=os.path.basename(path),
                                               offset=err.offset, detail=f"not a readable GGUF model, nothing "
                                               f"checked: {err.message}"))
                return None
        files.update((f.path, f) for f in model.files)
    return list(files.values())
def _check_llama_file(plan: FilePlan, out: Collector) -> None:
    f = plan.file
    if not plan.named:
        out.mismatches.append(Mismatch(kind="file-extra", path=f.path, subject=os.path.basename(f.path), offset=0,
                                       length=f.size, detail="file of the model, no line of the manifest names it "
                                       "or its tensors: not checked"))
        return
    out.mismatches.extend(structure_mismatches(f, f.path))
    hashes = hash_gguf_file(f, {name: (e.type,) for name, e in plan.tensors.items()},
                            () if plan.model is None else (plan.model.type,), progress=out.tally.part())
    out.bytes_hashed += hashes.bytes_hashed
    _compare_llama_tensors(plan, hashes, out)
    if plan.model is not None:
        _compare_llama_model_line(plan.file, plan.model, hashes.model[plan.model.type], out)


def _compare_llama_tensors(plan: FilePlan, hashes: FileHashes, out: Collector) -> None:
    """The file's tensors against the lines naming them (each by the strongest type given), in file order:
    a digest that differs, and with ``plan.extra`` a tensor no line names."""
    f = plan.file
    tensors = {t.name: t for t in f.tensors}
    named = {t.name: plan.tensors[t.name] for t in f.tensors if t.name in plan.tensors}
    found = {name: Facts(digest=hashes.tensors[name][want.type]) for name, want in named.items()}
    found.update((name, Facts()) for name in tensors if name not in named and plan.extra)
    out.tensors += len(named)
    order = {name: i for i, name in enumerate(tensors)}
    differences = compare_maps({name: Facts(digest=want.hex) for name, want in named.items()}, found)
    for d in sorted(differences, key=lambda d: order[d.key]):
        t = tensors[d.key]
        if d.kind == "extra":
            out.mismatches.append(Mismatch(kind="tensor-extra", path=f.path, subject=t.name, offset=t.offset,
                                           length=t.nbytes, tensor=t.name,
                                           detail="tensor in the file, not in the manifest"))
        else:
            want = named[d.key]
            out.mismatches.append(Mismatch(kind="tensor-data", path=f.path, subject=t.name, expected=want.hex,
                                           actual=str(d.actual), offset=t.offset, length=t.nbytes, tensor=t.name,
                                           rows=(0, max(t.n_rows - 1, 0)),
                                           detail=f"{want.type} of the tensor differs (manifest line {want.line})"))
            out.tensors_differing += 1


def _compare_llama_model_line(f: GGUFFile, want: HashEntry, have: str, out: Collector) -> None:
    """A model line: the digest of all of the file's tensor data, spanning its first to its last tensor."""
    differs = compare_facts(want.name, Facts(digest=want.hex), Facts(digest=have))
    out.checked.append(Checked(path=f.path, subject="all tensor data", algorithm=want.type, digest=have,
                               size=sum(t.nbytes for t in f.tensors), ok=not differs))
    if differs:
        start = min((t.offset for t in f.tensors), default=f.data_offset)
        end = max((t.end for t in f.tensors), default=start)
        out.mismatches.append(Mismatch(kind="model-data", path=f.path, subject=want.name, expected=want.hex,
                                       actual=have, offset=start, length=end - start,
                                       detail=f"{want.type} of all tensor data differs (manifest line "
                                              f"{want.line})"))
