"""llama.cpp's manifest format (llama-gguf-hash), read and written.

The manifests here are written from the format's description by code of this file alone: the tensors'
bytes found with the gguf package's reader, hashed with hashlib and xxhash, the uuid's version and variant
bits set by hand, each line printed as ``printf("%-8s  %-s  %s\\n", type, hex, name)``, tensor lines in
the header's order (xxh64, xxh3, sha1, sha256 each), then the model lines (the same, then uuid).
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path
from collections.abc import Callable, Sequence

import pytest
import xxhash
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader

import ggaudit
from ggaudit.io import positioned
from ggaudit.errors import ManifestError
from ggaudit.format.build import TensorSpec, encode_tensor_info, gguf_bytes, write_gguf
from ggaudit.verify.manifests.llama_hash import (MAX_LINE_CHARS, UUID_NAMESPACE, build_llama_hash, manifest_format,
                                                 read_llama_hash)

from ollama_support import ollama_store
from support import FIXTURES, assert_one_line_error, run_cli, tensor_payload

NAMESPACE = bytes.fromhex("ef001206dadc5f6da15f3359e577d4e5")
ALL = ("xxh64", "xxh3", "sha1", "sha256", "uuid")
PER_TENSOR = ("xxh64", "xxh3", "sha1", "sha256")
TEXT = bytes(range(32, 127)) * 4      # printable ASCII: uuid.uuid5 can hash it as a str


# --- the independent writer --------------------------------------------------------------------------------

def tensors_of(path: Path) -> list[tuple[str, bytes]]:
    """Each tensor's name and exact bytes, in the header's order, by the gguf package's reader."""
    data = path.read_bytes()
    return [(str(t.name), data[int(t.data_offset):int(t.data_offset) + int(t.n_bytes)])
            for t in GGUFReader(path).tensors]


def uuid_of(data: bytes) -> str:
    """RFC 4122 version 5: sha1 of the namespace's bytes then the data, version 5, variant 10xx."""
    b = bytearray(hashlib.sha1(NAMESPACE + data).digest()[:16])
    b[6] = (b[6] & 0x0F) | 0x50
    b[8] = (b[8] & 0x3F) | 0x80
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def digest(kind: str, data: bytes) -> str:
    if kind == "xxh64":
        return xxhash.xxh64(data, seed=0).hexdigest()
    if kind == "xxh3":
        return xxhash.xxh3_64(data).hexdigest()
    if kind == "uuid":
        return uuid_of(data)
    return hashlib.new(kind, data).hexdigest()


def line(kind: str, hexdigest: str, name: str) -> str:
    return "%-8s  %-s  %s\n" % (kind, hexdigest, name)    # noqa: UP031 - llama-gguf-hash's printf, as written


def llama_manifest(path: Path, types: Sequence[str] = ("xxh64",), name: str | None = None) -> str:
    """What llama-gguf-hash prints for ``path`` (named ``name``, default as given) with these types."""
    name = str(path) if name is None else name
    tensors = tensors_of(path)
    out = [line(k, digest(k, data), f"{name}:{tensor}") for tensor, data in tensors for k in PER_TENSOR if k in types]
    everything = b"".join(data for _, data in tensors)
    out += [line(k, digest(k, everything), name) for k in ALL if k in types]
    return "".join(out)


# --- models ------------------------------------------------------------------------------------------------

SPECS = [TensorSpec("token_embd.weight", T.Q8_0, (64, 6), tensor_payload(T.Q8_0, (64, 6), seed=1)),
         TensorSpec("blk.0.attn_norm.weight", T.F32, (64,), tensor_payload(T.F32, (64,), seed=2)),
         TensorSpec("blk.0.text.weight", T.I8, (len(TEXT),), TEXT)]


def model(tmp_path: Path, name: str = "m.gguf") -> Path:
    path = tmp_path / name
    write_gguf(path, SPECS, {"general.architecture": "llama"})
    return path


def offsets(path: Path) -> dict[str, tuple[int, int]]:
    return {str(t.name): (int(t.data_offset), int(t.n_bytes)) for t in GGUFReader(path).tensors}


def flip(path: Path, tensor: str, at: int) -> int:
    """Flip one bit of ``tensor``'s byte ``at``; returns the byte's file offset."""
    where = offsets(path)[tensor][0] + at
    data = bytearray(path.read_bytes())
    data[where] ^= 0x01
    path.write_bytes(bytes(data))
    return where


def write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode("utf-8"))
    return path


# --- the format's constants ----------------------------------------------------------------------------------

def test_the_namespace_is_llama_cpps() -> None:
    assert uuid.uuid5(uuid.NAMESPACE_URL, "en.wikipedia.org/wiki/Llama.cpp") == UUID_NAMESPACE
    assert UUID_NAMESPACE.bytes == NAMESPACE


def test_the_test_uuid_is_pythons_uuid5(tmp_path: Path) -> None:
    """The hand-made uuid is uuid.uuid5's, on data uuid5 can take (text)."""
    assert uuid_of(TEXT) == str(uuid.uuid5(UUID_NAMESPACE, TEXT.decode("ascii")))


# --- written -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("hashes, types", [(None, ("xxh64",)), ("all", ALL), ("sha256", ("sha256",)),
                                           ("uuid,xxh3", ("xxh3", "uuid")), ("sha1,xxh64,sha1", ("xxh64", "sha1"))])
def test_the_manifest_written_is_byte_identical_to_the_independent_one(tmp_path: Path, hashes: str | None,
                                                                       types: tuple[str, ...]) -> None:
    path, out = model(tmp_path), tmp_path / "m.hash"
    args = ["manifest", path, "-o", out, "--manifest-format", "llama-gguf-hash"]
    result = run_cli(args + ([] if hashes is None else ["--hash", hashes]))
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert out.read_bytes() == llama_manifest(path, types).encode()
    models = [ln for ln in out.read_text().splitlines() if ln.endswith(str(path))]
    assert result.stdout.splitlines() == [
        f"wrote {out}: {3 * len([t for t in types if t != 'uuid']) + len(types)} llama-gguf-hash lines "
        f"({', '.join(types)}), 3 tensors"] + [f"  {path}: {m.split()[0]} {m.split()[1]} (all tensor data)"
                                                for m in models]


def test_the_model_line_is_the_uuid5_of_all_tensor_data(tmp_path: Path) -> None:
    """With every tensor printable text, the model's uuid line is Python's own uuid.uuid5 of it."""
    path = tmp_path / "text.gguf"
    write_gguf(path, [TensorSpec("a", T.I8, (len(TEXT),), TEXT), TensorSpec("b", T.I8, (64,), TEXT[:64])])
    result = run_cli(["manifest", path, "-o", "-", "--manifest-format", "llama-gguf-hash", "--hash", "uuid"])
    assert result.exit_code == 0, result.stderr
    assert result.stdout == f"uuid      {uuid.uuid5(UUID_NAMESPACE, (TEXT + TEXT[:64]).decode())}  {path}\n"


def test_stdout_holds_the_same_lines_as_the_file(tmp_path: Path) -> None:
    path, out = model(tmp_path), tmp_path / "m.hash"
    args = ["--manifest-format", "llama-gguf-hash", "--hash", "all"]
    assert run_cli(["manifest", path, "-o", out, *args]).exit_code == 0
    printed = run_cli(["manifest", path, "-o", "-", *args])
    assert printed.exit_code == 0 and printed.stdout == out.read_text()


def test_format_llama_gguf_hash_is_the_manifest_format_too(tmp_path: Path) -> None:
    """``manifest --format llama-gguf-hash`` (the issue's spelling) writes what --manifest-format does."""
    path = model(tmp_path)
    long, short = tmp_path / "long.hash", tmp_path / "short.hash"
    assert run_cli(["manifest", path, "-o", long, "--manifest-format", "llama-gguf-hash"]).exit_code == 0
    result = run_cli(["manifest", path, "-o", short, "--format", "llama-gguf-hash"])
    assert result.exit_code == 0, result.stderr
    assert short.read_bytes() == long.read_bytes() and short.read_text().startswith("xxh64     ")
    assert run_cli(["verify", path, "--manifest", short]).exit_code == 0


def test_a_split_set_is_one_block_per_file(tmp_path: Path) -> None:
    first = FIXTURES / "split-00001-of-00002.gguf"
    second = FIXTURES / "split-00002-of-00002.gguf"
    result = run_cli(["manifest", first, "-o", "-", "--manifest-format", "llama-gguf-hash", "--hash", "sha1,uuid"])
    assert result.exit_code == 0, result.stderr
    assert result.stdout == (llama_manifest(first, ("sha1", "uuid"))
                             + llama_manifest(second, ("sha1", "uuid"), name=os.path.join(str(FIXTURES), second.name)))


def test_a_header_out_of_file_order_hashes_the_model_in_header_order(tmp_path: Path) -> None:
    """The model line concatenates tensors as the header lists them, not as the file holds them."""
    path = swapped(tmp_path)
    result = run_cli(["manifest", path, "-o", "-", "--manifest-format", "llama-gguf-hash", "--hash", "all"])
    assert result.exit_code == 0, result.stderr
    assert result.stdout == llama_manifest(path, ALL)


def swapped(tmp_path: Path) -> Path:
    """A model whose header lists its two tensors in the reverse of their order in the file."""
    data, at = gguf_bytes(SPECS[:2])
    rel = [at[s.name] - at[SPECS[0].name] for s in SPECS[:2]]
    infos = [encode_tensor_info(s.name, s.ggml_type, s.shape, r) for s, r in zip(SPECS[:2], rel, strict=True)]
    assert data.count(infos[0] + infos[1]) == 1
    path = tmp_path / "swapped.gguf"
    path.write_bytes(data.replace(infos[0] + infos[1], infos[1] + infos[0]))
    assert [name for name, _ in tensors_of(path)] == [SPECS[1].name, SPECS[0].name]
    return path


@pytest.mark.parametrize("make", [model, swapped])
def test_each_byte_of_tensor_data_is_read_once(tmp_path: Path, make: Callable[[Path], Path],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """All five types from one read: one pass front to back, or one per run of a header out of order."""
    path = make(tmp_path)
    spans: list[tuple[int, int]] = []
    real = positioned.pread_into

    def counting(fd: int, view: memoryview, offset: int) -> int:
        n = real(fd, view, offset)
        spans.append((offset, n))
        return n

    monkeypatch.setattr(positioned, "pread_into", counting)
    built = build_llama_hash(path, "all")
    assert "".join(h.text() for h in built.lines) == llama_manifest(path, ALL)
    where = sorted(offsets(path).values())
    runs = [(s, n) for s, n in where] if make is swapped else [(where[0][0], where[-1][0] + where[-1][1] - where[0][0])]
    assert sorted(spans) == runs


@pytest.mark.parametrize("args, message", [
    (["--hash", "sha256"], "--hash is for --manifest-format llama-gguf-hash"),
    (["--manifest-format", "llama-gguf-hash", "--group-bytes", "4096"],
     "--group-bytes is for the ggaudit manifest, not llama-gguf-hash"),
    (["--manifest-format", "llama-gguf-hash", "--hash", "md5"],
     "--hash: 'md5' is not one of xxh64, xxh3, sha1, sha256, uuid or all"),
    (["--manifest-format", "llama-gguf-hash", "--hash", ","], "--hash: '' is not one of xxh64, xxh3, sha1, sha256, "
                                                            "uuid or all"),
])
def test_manifest_options_that_do_not_fit_are_refused(tmp_path: Path, args: list[str], message: str) -> None:
    out = tmp_path / "m.hash"
    line_ = assert_one_line_error(run_cli(["manifest", model(tmp_path), "-o", out, *args]))
    assert line_ == f"ggaudit: error: {message}"
    assert not out.exists()


def test_a_tensor_name_with_a_line_break_cannot_be_written(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    write_gguf(path, [TensorSpec("a\nb", T.I8, (4,), b"abcd")])
    assert assert_one_line_error(run_cli(["manifest", path, "-o", tmp_path / "m.hash", "--manifest-format",
                                          "llama-gguf-hash"])) == (
        f"ggaudit: error: {path}: tensor 'a\\nb' cannot be named in a llama-gguf-hash line (a line break or a NUL)")


# --- verified --------------------------------------------------------------------------------------------------

def test_an_independent_manifest_verifies_clean(tmp_path: Path) -> None:
    path = model(tmp_path)
    manifest = write(tmp_path / "m.hash", llama_manifest(path, ALL))
    result = run_cli(["verify", path, "--manifest", manifest])
    assert result.exit_code == 0, (result.stdout, result.stderr)
    everything = b"".join(data for _, data in tensors_of(path))
    assert result.stdout.splitlines() == [
        f"verify llama-gguf-hash: {path}",
        f"ok sha256 {hashlib.sha256(everything).hexdigest()}: file {path}, {len(everything)} bytes (all tensor data)",
        f"summary: 1 file checked, 0 from the cache, {len(everything)} bytes hashed, 0 mismatches"]
    assert result.stderr == ""


def span(path: Path) -> tuple[int, int]:
    """Offset and length of the file's tensor data, first tensor to last (padding included)."""
    where = offsets(path).values()
    first = min(s for s, _ in where)
    return first, max(s + n for s, n in where) - first


@pytest.mark.parametrize("types", [("xxh64",), ("xxh3",), ("sha1",), ("sha256",), ALL])
def test_a_flipped_byte_fails_naming_the_tensor(tmp_path: Path, types: tuple[str, ...]) -> None:
    path = model(tmp_path)
    manifest = write(tmp_path / "m.hash", llama_manifest(path, types))
    before = dict(tensors_of(path))
    flip(path, "blk.0.attn_norm.weight", 17)
    after = dict(tensors_of(path))
    kind = next(k for k in ("sha256", "sha1", "xxh64", "xxh3") if k in types)    # the strongest given
    per_tensor = [k for k in types if k != "uuid"]
    tensor_line = len(per_tensor) + 1 + per_tensor.index(kind)      # the second tensor's lines
    model_line = 3 * len(per_tensor) + 1 + types.index(kind)
    start, length = offsets(path)["blk.0.attn_norm.weight"]
    first, whole = span(path)
    result = run_cli(["verify", path, "--manifest", manifest])
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert result.stdout.splitlines() == [
        f"verify llama-gguf-hash: {path}",
        f"MISMATCH tensor-data: file {path}, offset {start}, length {length}; tensor blk.0.attn_norm.weight, "
        f"rows 0-0: {kind} of the tensor differs (manifest line {tensor_line})",
        f"  expected: {digest(kind, before['blk.0.attn_norm.weight'])}",
        f"  actual:   {digest(kind, after['blk.0.attn_norm.weight'])}",
        f"MISMATCH model-data: file {path}, offset {first}, length {whole} ({path}): {kind} of all tensor data "
        f"differs (manifest line {model_line})",
        f"  expected: {digest(kind, b''.join(before.values()))}",
        f"  actual:   {digest(kind, b''.join(after.values()))}",
        f"summary: 1 file checked, 0 from the cache, {sum(len(d) for d in after.values())} bytes hashed, "
        "2 mismatches"]


def test_lines_match_by_tensor_name_whatever_path_they_were_made_with(tmp_path: Path) -> None:
    """Made on Windows (a path with ':' and a space), checked here under another name."""
    path = model(tmp_path)
    manifest = write(tmp_path / "m.hash", llama_manifest(path, ("sha256",), name="C:\\models\\my model.gguf"))
    result = run_cli(["verify", path, "--manifest", manifest])
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert result.stdout.splitlines()[1].startswith("ok sha256 ")


def test_tensors_missing_from_the_model_and_from_the_manifest_are_reported(tmp_path: Path) -> None:
    path = model(tmp_path)
    lines = [ln for ln in llama_manifest(path).splitlines(keepends=True) if ":blk.0.text.weight" not in ln]
    gone = line("xxh64", "0123456789abcdef", f"{path}:blk.9.gone.weight")
    manifest = write(tmp_path / "m.hash", "".join([*lines[:1], gone, *lines[1:]]))
    start, length = offsets(path)["blk.0.text.weight"]
    result = run_cli(["verify", path, "--manifest", manifest])
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert result.stdout.splitlines()[1].startswith("ok xxh64 ")      # the model line still matches
    assert result.stdout.splitlines()[2:-1] == [
        f"MISMATCH tensor-missing: file {path}; tensor blk.9.gone.weight: tensor in the manifest (line 2), "
        "not in the model",
        "  expected: 0123456789abcdef",
        "  actual:   -",
        f"MISMATCH tensor-extra: file {path}, offset {start}, length {length}; tensor blk.0.text.weight: tensor in "
        "the file, not in the manifest"]


def test_without_a_model_line_names_after_the_last_colon_are_tensors(tmp_path: Path) -> None:
    """Tensor lines only (made at C:\\m.gguf): a tensor the model lacks is still a tensor, not a model line."""
    path = model(tmp_path)
    made = llama_manifest(path, name="C:\\m.gguf").splitlines(keepends=True)
    assert made[-1].endswith("  C:\\m.gguf\n")
    manifest = write(tmp_path / "m.hash", "".join(made[:-1]) + line("xxh64", "0" * 16, "C:\\m.gguf:blk.9.gone"))
    result = run_cli(["verify", path, "--manifest", manifest])
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert result.stdout.splitlines()[1:] == [
        f"MISMATCH tensor-missing: file {path}; tensor blk.9.gone: tensor in the manifest (line 4), not in the model",
        "  expected: 0000000000000000",
        "  actual:   -",
        f"summary: 0 files checked, 0 from the cache, {sum(len(d) for _, d in tensors_of(path))} bytes hashed, "
        "1 mismatch"]


def test_the_strongest_hash_given_is_the_one_checked(tmp_path: Path) -> None:
    """sha256 > sha1 > uuid > xxh64 > xxh3: a wrong weaker line is not looked at, a wrong stronger one is."""
    path = model(tmp_path)
    good = llama_manifest(path, ("xxh64", "sha256"))
    weak_wrong = good.replace(digest("xxh64", tensors_of(path)[0][1]), "0" * 16)
    assert weak_wrong != good
    result = run_cli(["verify", path, "--manifest", write(tmp_path / "a.hash", weak_wrong)])
    assert result.exit_code == 0, result.stdout
    strong_wrong = good.replace(digest("sha256", tensors_of(path)[0][1]), "0" * 64)
    result = run_cli(["verify", path, "--manifest", write(tmp_path / "b.hash", strong_wrong)])
    assert result.exit_code == 1
    assert f"  expected: {'0' * 64}" in result.stdout.splitlines()


def test_model_lines_only_check_all_tensor_data(tmp_path: Path) -> None:
    """As llama-gguf-hash --no-layer writes: no tensor is 'extra', the model line is the check."""
    path = model(tmp_path)
    only = "".join(ln for ln in llama_manifest(path, ALL).splitlines(keepends=True)
                   if ln.rstrip("\n").endswith(str(path)))
    assert only.count("\n") == 5
    manifest = write(tmp_path / "m.hash", only)
    assert run_cli(["verify", path, "--manifest", manifest]).exit_code == 0
    before = b"".join(d for _, d in tensors_of(path))
    flip(path, "blk.0.text.weight", 0)
    after = b"".join(d for _, d in tensors_of(path))
    first, whole = span(path)
    result = run_cli(["verify", path, "--manifest", manifest])
    assert result.exit_code == 1
    assert result.stdout.splitlines()[1:] == [
        f"MISMATCH model-data: file {path}, offset {first}, length {whole} ({path}): sha256 of all tensor data "
        "differs (manifest line 4)",
        f"  expected: {hashlib.sha256(before).hexdigest()}",
        f"  actual:   {hashlib.sha256(after).hexdigest()}",
        f"summary: 1 file checked, 0 from the cache, {len(after)} bytes hashed, 1 mismatch"]


def test_a_split_set_verifies_against_one_block_per_shard(tmp_path: Path) -> None:
    first, second = FIXTURES / "split-00001-of-00002.gguf", FIXTURES / "split-00002-of-00002.gguf"
    text = llama_manifest(first, ("sha1",), name="/elsewhere/a.gguf") + llama_manifest(second, ("sha1",), name="b")
    result = run_cli(["verify", second, "--manifest", write(tmp_path / "m.hash", text)])
    assert result.exit_code == 0, result.stdout
    assert [ln.split(": file ")[1].split(",")[0] for ln in result.stdout.splitlines() if ln.startswith("ok ")] == [
        str(first), str(second)]


def test_an_ollama_model_and_its_projector_are_one_manifest(tmp_path: Path) -> None:
    """Written as a block per blob, read back matched by tensor names across both files."""
    weights, projector = ollama_store(tmp_path / "store", (FIXTURES / "all_types.gguf").read_bytes(),
                                      (FIXTURES / "ple_iq4_nl.gguf").read_bytes())
    out, store = tmp_path / "m.hash", ["--store", tmp_path / "store"]
    made = run_cli(["manifest", "ollama:tiny", "-o", out, "--manifest-format", "llama-gguf-hash", *store])
    assert made.exit_code == 0, made.stderr
    assert out.read_text() == llama_manifest(weights) + llama_manifest(projector)
    result = run_cli(["verify", "ollama:tiny", "--manifest", out, *store])
    assert result.exit_code == 0, result.stdout
    assert [ln.split(": file ")[1].split(",")[0] for ln in result.stdout.splitlines() if ln.startswith("ok ")] == [
        str(weights), str(projector)]


def test_an_absent_model_is_missing_and_a_broken_one_is_a_header_mismatch(tmp_path: Path) -> None:
    path = model(tmp_path)
    manifest = write(tmp_path / "m.hash", llama_manifest(path))
    result = run_cli(["verify", tmp_path / "gone.gguf", "--manifest", manifest])
    assert result.exit_code == 1
    assert result.stdout.splitlines()[1] == (
        f"MISMATCH missing: file {tmp_path / 'gone.gguf'} (gone.gguf): model file not found")
    path.write_bytes(b"GGUF" + bytes(4))
    result = run_cli(["verify", path, "--manifest", manifest])
    assert result.exit_code == 1
    assert result.stdout.splitlines()[1].startswith(f"MISMATCH header: file {path}, offset ")


def test_the_library_verifies_either_format(tmp_path: Path) -> None:
    path = model(tmp_path)
    manifest = write(tmp_path / "m.hash", llama_manifest(path, ("xxh3",)))
    report = ggaudit.verify(path, manifest=manifest)
    assert (report.ok, report.kind, [c.algorithm for c in report.checked]) == (True, "llama-gguf-hash", ["xxh3"])
    opened = ggaudit.open_model(path)
    assert ggaudit.verify(opened, manifest=manifest).ok
    assert run_cli(["manifest", path, "-o", tmp_path / "m.json"]).exit_code == 0
    assert ggaudit.verify(path, manifest=tmp_path / "m.json").kind == "manifest"


def test_verify_json_names_the_tensor(tmp_path: Path) -> None:
    path = model(tmp_path)
    manifest = write(tmp_path / "m.hash", llama_manifest(path, ("uuid", "xxh64")))
    flip(path, "token_embd.weight", 3)
    doc = json.loads(run_cli(["verify", path, "--manifest", manifest, "--json"]).stdout)
    (report,) = doc["models"]
    assert [(m["kind"], m["tensor"]) for m in report["mismatches"]] == [("tensor-data", "token_embd.weight"),
                                                                         ("model-data", None)]
    assert report["checked"][0]["algorithm"] == "uuid"


# --- malformed manifests ---------------------------------------------------------------------------------------

HEX16 = "0123456789abcdef"


@pytest.mark.parametrize("text, message", [
    (f"xxh65     {HEX16}  m.gguf\n", "line 1, type: 'xxh65' is not one of xxh64, xxh3, sha1, sha256, uuid"),
    (f"\nxxh64     {HEX16[:12]}  m.gguf\n", "line 2, hex: '0123456789ab' is not 16 lowercase hex digits (xxh64)"),
    (f"sha1      {'AB' * 20}  m.gguf\n", f"line 1, hex: '{'AB' * 20}' is not 40 lowercase hex digits (sha1)"),
    (f"sha256    {'g' * 64}  m.gguf\n", f"line 1, hex: '{'g' * 40}'... (64 chars) is not 64 lowercase hex digits "
                                       "(sha256)"),
    (f"xxh64     {'0' * 100_000}  m.gguf\n", f"line 1: is longer than {MAX_LINE_CHARS} characters"),
    (f"xxh64     {HEX16}  m.gguf\0x\n", "line 1: holds a NUL byte"),
    (f"xxh64     {HEX16}\n", f"line 1: 'xxh64     {HEX16}' is not 'TYPE  HEX  NAME'"),
    ("uuid      12345678-1234-5678-9abc-def0  m.gguf\n",
     "line 1, hex: '12345678-1234-5678-9abc-def0' is not a lowercase UUID (8-4-4-4-12 hex digits)"),
    (f"xxh64     {HEX16}  m.gguf\nxxh64     {'f' * 16}  m.gguf\n",
     "line 2, name: 'm.gguf' has another xxh64 at line 1"),
    ("xxh64\n" + "\n" * (1 << 22), f"llama-gguf-hash manifest has more than {1 << 22} lines"),
    ("x" + "\xff", None),
])
def test_a_malformed_manifest_is_one_error_line(tmp_path: Path, text: str, message: str | None) -> None:
    path = model(tmp_path)
    manifest = tmp_path / "m.hash"
    if message is None:         # not UTF-8: said with the offset, before any line is read
        manifest.write_bytes(b"x\xff")
        message = "offset 1: manifest is not UTF-8 text"
    else:
        write(manifest, text)
        with pytest.raises(ManifestError):
            read_llama_hash(manifest)
    assert assert_one_line_error(run_cli(["verify", path, "--manifest", manifest])) == (
        f"ggaudit: error: {manifest}: {message}")


def test_the_same_line_twice_is_one_line(tmp_path: Path) -> None:
    path = model(tmp_path)
    text = llama_manifest(path)
    entries = read_llama_hash(write(tmp_path / "m.hash", text + text))
    assert [e.line for e in entries] == [1, 2, 3, 4]
    assert run_cli(["verify", path, "--manifest", tmp_path / "m.hash"]).exit_code == 0


def test_two_blocks_disagreeing_about_one_tensor_are_refused(tmp_path: Path) -> None:
    path = model(tmp_path)
    other = llama_manifest(path, name="other.gguf").replace(digest("xxh64", tensors_of(path)[0][1]), HEX16)
    manifest = write(tmp_path / "m.hash", llama_manifest(path) + other)
    assert assert_one_line_error(run_cli(["verify", path, "--manifest", manifest])) == (
        f"ggaudit: error: {manifest}: line 5: 'other.gguf:token_embd.weight' gives another xxh64 than line 1 for "
        "the same data")


def test_a_file_of_blank_lines_holds_no_hashes(tmp_path: Path) -> None:
    with pytest.raises(ManifestError) as caught:
        read_llama_hash(write(tmp_path / "m.hash", "\n \r\n\t\n"))
    assert str(caught.value) == f"{tmp_path / 'm.hash'}: llama-gguf-hash manifest holds no hash lines"


@pytest.mark.parametrize("text, what", [("\ufeff\n  xxh64     0 m", "llama-gguf-hash"),
                                        ("  {}", "ggaudit-tensor-manifest"), ("[]", "ggaudit-tensor-manifest"),
                                        ("", "ggaudit-tensor-manifest"), ("\u00e9t\u00e9", "ggaudit-tensor-manifest")])
def test_the_format_is_told_by_the_first_character(tmp_path: Path, text: str, what: str) -> None:
    """Every llama-gguf-hash line starts with its type, a letter; anything else is read as JSON."""
    assert manifest_format(write(tmp_path / "m", text)) == what
