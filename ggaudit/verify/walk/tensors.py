"""ggaudit's tensor manifest: a model (file or split set) against the sha256 of each file and the xxh3-128
of each tensor and row group, which narrows a damaged file down to the tensor and the rows that changed."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence

from ...errors import FormatError
from ...format.layout import open_gguf
from ...io.fan_out import Progress
from ...io.hashing import Sha256
from ...io.identity import FileIdentity
from ...untrusted import OUTSIDE, confine, sibling_roots
from ..cache import DigestCache
from ..collect import Collector, absent, file_mismatch, finish, hash_unchanged, structure_mismatches
from ..compare import Facts, compare_facts, compare_maps
from ..manifests.tensor import ManifestFile, TensorDigest, TensorManifest, digest_gguf_file, read_tensor_manifest
from ..report import Checked, Mismatch, VerifyReport
from .tensor_match import match_manifest


def verify_tensor_manifest(model_path: str | os.PathLike[str], manifest_path: str | os.PathLike[str],
                           *, also: Sequence[str | os.PathLike[str]] = (), fail_fast: bool = False,
                           progress: Progress | None = None, digest_cache: DigestCache | None = None
                           ) -> VerifyReport:
    """Check a model (file or split set) against a tensor manifest, one read per file.

    The files are the manifest's, matched to the model's (``model_path``, any shard of a set, and ``also``:
    more files of the model, an Ollama model's projector) as check matches them (:func:`match_manifest`: by
    name, else a copy by its tensors' layout, else a single file's manifest in the model's file's place),
    else looked up next to ``model_path``; one matched under another name is said in a warning. Reports
    files missing, resized, with another sha256 or with a header that no longer parses; tensors missing,
    added or re-shaped; and for tensors whose bytes changed, each run of differing row groups with its rows
    and file span. Every
    file of the model the manifest does not name is a ``file-extra`` mismatch (a shard its split set's
    names say exists and that is absent, ``missing``); a manifest that names none of the model's files
    (nor, checking a renamed copy, any of its tensors) is NothingChecked.
    """
    manifest = read_tensor_manifest(manifest_path)
    out = Collector(fail_fast, digest_cache, progress=progress)
    given = os.fspath(model_path)
    match = match_manifest(manifest, [given, *(os.fspath(p) for p in also)], manifest_path=manifest_path)
    out.warnings.extend(f"manifest describes {e.name}, checking {os.path.basename(path)} in its place"
                        for e, path in match.renamed)
    # The model's files the manifest does not name, recorded before anything is read.
    out.mismatches.extend(_unlisted_file(path, given) for path in match.extra)
    located = match.located
    out.plan(path for _, path in located if _leaves_folder(path, given) is None)
    for file_digest, path in located:
        if out.full:
            break
        problem = _leaves_folder(path, given)
        if problem is not None:
            out.mismatches.append(Mismatch(kind="link", path=path, subject=file_digest.name,
                                           expected=file_digest.sha256, detail=problem))
        elif absent(path):
            out.mismatches.append(Mismatch(kind="missing", path=path, subject=file_digest.name,
                                           expected=file_digest.sha256, detail="file of the manifest not found"))
        else:
            _check_model_file(manifest, file_digest, path, out)
    return finish(out, given, "manifest", empty="no file of the manifest was checked")


def _leaves_folder(path: str, given: str) -> str | None:
    """Why a file the manifest names next to the model must not be opened (a link pointing out of the
    model's folder, a loop), or None."""
    if path == given:
        return None
    problem = confine(path, sibling_roots(given))
    if problem == OUTSIDE:
        return "resolves outside the model's folder (a link pointing out): not followed"
    return problem


def _unlisted_file(path: str, given: str) -> Mismatch:
    """A file of the model that the manifest does not name: ``file-extra`` (never opened: nothing says what
    it should hold), or why it is not there to be one."""
    name = os.path.basename(path)
    problem = _leaves_folder(path, given)
    if problem is not None:
        return Mismatch(kind="link", path=path, subject=name, detail=problem)
    try:
        size: int | None = os.stat(path).st_size
    except FileNotFoundError:
        return Mismatch(kind="missing", path=path, subject=name, detail="shard of the model's split set not found "
                        "(and not in the manifest)")
    except OSError:
        size = None
    return Mismatch(kind="file-extra", path=path, subject=name, offset=None if size is None else 0, length=size,
                    detail="file of the model, not in the manifest: not checked")


def _check_model_file(manifest: TensorManifest, expected: ManifestFile, path: str, out: Collector) -> None:
    wanted = [t for t in manifest.tensors if t.file == expected.name]
    try:
        opened = open_gguf(path)
        actual, tensors = digest_gguf_file(opened, manifest.group_bytes, progress=out.tally.part())
        out.mismatches.extend(structure_mismatches(opened, expected.name))
    except FormatError as err:
        # A damaged header is a finding too: say so, and still compare the whole file's digest.
        out.mismatches.append(Mismatch(kind="header", path=path, subject=expected.name, offset=err.offset,
                                       detail=f"no longer parses as GGUF, tensors not checked: {err}"))
        identity = FileIdentity.now(path, "while it was being hashed")
        digest = hash_unchanged(path, Sha256(), identity, out.tally.part())
        actual, tensors = ManifestFile(expected.name, identity.size, digest), ()
        wanted = []
    out.bytes_hashed += actual.size
    differences = compare_facts(expected.name, Facts(size=expected.size, digest=expected.sha256),
                                Facts(size=actual.size, digest=actual.sha256))
    out.checked.append(Checked(path=path, subject=expected.name, algorithm="sha256", digest=actual.sha256,
                               size=actual.size, ok=not differences))
    out.mismatches.extend(file_mismatch(d, path, "sha256", actual.size) for d in differences)
    problems = compare_tensors(wanted, tensors, path)
    out.mismatches.extend(problems)
    out.tensors += len(wanted)
    out.tensors_differing += len({m.tensor for m in problems if m.kind != "tensor-extra"})


def compare_tensors(expected: Sequence[TensorDigest], actual: Sequence[TensorDigest],
                    path: str) -> list[Mismatch]:
    """Tensor-level differences between a manifest's tensors and freshly computed ones: the maps of both
    compared (:func:`compare_maps`), then each tensor whose digests differ narrowed to its row groups."""
    wanted, found = {t.name: t for t in expected}, {t.name: t for t in actual}
    problems: list[Mismatch] = []
    for d in compare_maps({n: _facts(t) for n, t in wanted.items()}, {n: _facts(t) for n, t in found.items()}):
        if d.kind == "missing":
            problems.append(Mismatch(kind="tensor-missing", path=path, subject=d.key, tensor=d.key,
                                     detail="tensor in the manifest, not in the file"))
        elif d.kind == "extra":
            have = found[d.key]
            problems.append(Mismatch(kind="tensor-extra", path=path, subject=d.key, offset=have.offset,
                                     length=have.nbytes, tensor=d.key,
                                     detail="tensor in the file, not in the manifest"))
        elif d.kind == "layout":
            have = found[d.key]
            problems.append(Mismatch(kind="tensor-layout", path=path, subject=d.key, expected=str(d.expected),
                                     actual=str(d.actual), offset=have.offset, length=have.nbytes, tensor=d.key,
                                     detail="type, shape or row layout differs"))
        else:
            # Both digests count: the row groups localise a change, the whole-tensor digest still
            # stands on its own (a manifest whose groups agree but whose tensor digest does not).
            want, have = wanted[d.key], found[d.key]
            problems.extend(list(_differing_runs(want, have, path)) or [_whole_tensor_mismatch(want, have, path)])
    return problems


def _facts(t: TensorDigest) -> Facts:
    """What is compared of a tensor: its layout, and its digests (the whole tensor's, then each row group's,
    as one text: any of them differing is a difference)."""
    return Facts(layout=_geometry_text(t), digest=" ".join((t.xxh3_128, *t.groups)))


def _geometry_text(t: TensorDigest) -> str:
    return (f"{t.ggml_type} {list(t.shape)}, {t.n_rows} rows of {t.row_bytes} bytes ({t.nbytes} in all), "
            f"{t.rows_per_group} per row group")


def _whole_tensor_mismatch(want: TensorDigest, have: TensorDigest, path: str) -> Mismatch:
    return Mismatch(kind="tensor-data", path=path, subject=want.name, expected=want.xxh3_128, actual=have.xxh3_128,
                    offset=have.offset, length=have.nbytes, tensor=want.name, rows=(0, max(have.n_rows - 1, 0)),
                    detail="xxh3-128 of the whole tensor differs (no row group's does)")


def _differing_runs(want: TensorDigest, have: TensorDigest, path: str) -> Iterator[Mismatch]:
    """One Mismatch per run of consecutive differing row groups, with the first group's digests."""
    bad = [i for i, (a, b) in enumerate(zip(want.groups, have.groups, strict=False)) if a != b]
    runs: list[list[int]] = []
    for g in bad:
        if runs and runs[-1][-1] == g - 1:
            runs[-1].append(g)
        else:
            runs.append([g])
    for run in runs:
        first_row, _ = have.group_rows(run[0])
        _, last_row = have.group_rows(run[-1])
        start, _ = have.group_span(run[0])
        end = sum(have.group_span(run[-1]))
        yield Mismatch(kind="tensor-data", path=path, subject=want.name, expected=want.groups[run[0]],
                       actual=have.groups[run[0]], offset=start, length=end - start, tensor=want.name,
                       rows=(first_row, last_row),
                       detail=f"xxh3-128 of {len(run)} row group(s) differs")
