"""Untrusted names (issue 6).

Text read from a file or a manifest (tensor names, metadata keys and strings, checksum-file names,
media types) reaches a terminal only escaped, and stays exact in JSON. Names and digests from
manifests and checksum files never lead outside the store or folder: ``../``, absolute paths and
symlinks pointing out are reported, not followed.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from gguf import GGMLQuantizationType as T

from ggaudit.format.build import TensorSpec, write_gguf
from ggaudit.cli import main
from ggaudit.errors import ManifestError, UsageError
from ggaudit.stores.ollama import parse_ollama_name
from ggaudit.stores.sums import read_sums
from ggaudit.verify.manifests.tensor import read_tensor_manifest
from ggaudit.escaping import escape

from platforms import WINDOWS, needs_symlinks
from support import assert_one_line_error, run_cli, tensor_payload

CLEAR = "\x1b[2J"
#: Names a hostile file might carry: screen clear, title set (OSC ... BEL), a fake line, bidi override,
#: C1 CSI, a lone DEL.
EVIL = [f"{CLEAR}embd", "t\x1b]0;pwned\x07", "x\r\nggaudit: all clean", "\u202egnp.exe", "c1\x9b31m", "del\x7f"]


def _terminal_safe(text: str) -> None:
    """No control character but the newlines that separate lines."""
    bad = [ch for ch in text if (ord(ch) < 0x20 and ch != "\n") or 0x7F <= ord(ch) < 0xA0
           or ch in "\u2028\u2029" or 0x202A <= ord(ch) <= 0x202E or 0x2066 <= ord(ch) <= 0x2069]
    assert not bad, (bad, text[:400])


@pytest.fixture()
def evil_model(tmp_path: Path) -> Path:
    """Tensors named EVIL (the first an embedding table, one F32 holding a NaN); hostile metadata."""
    path = tmp_path / "evil.gguf"
    f32 = np.ones(64, dtype="<f4")
    f32[5] = np.nan
    tensors = [TensorSpec(EVIL[0], T.Q8_0, (64, 16), tensor_payload(T.Q8_0, (64, 16), seed=1)),
               TensorSpec(EVIL[1], T.F32, (64,), f32.tobytes())]
    tensors += [TensorSpec(name, T.F16, (8,), np.ones(8, "<f2").tobytes()) for name in EVIL[2:]]
    write_gguf(path, tensors, {"general.architecture": "llama", f"key{CLEAR}": "value\x1b[31mred\x07",
                               "general.name": EVIL[2]})
    return path


def test_info_escapes_every_hostile_string_and_json_keeps_them(evil_model: Path) -> None:
    text = run_cli(["info", evil_model])
    assert text.exit_code == 0, text.output
    _terminal_safe(text.stdout)
    for name in EVIL:
        assert escape(name) in text.stdout
    assert escape(f"key{CLEAR}") in text.stdout and escape("value\x1b[31mred\x07") in text.stdout
    doc = json.loads(run_cli(["info", evil_model, "--json"]).stdout)["models"][0]
    assert [t["name"] for t in doc["tensors"]] == EVIL
    assert doc["files"][0]["metadata"][f"key{CLEAR}"]["value"] == "value\x1b[31mred\x07"


def test_scan_escapes_names_in_text_and_keeps_them_in_json(evil_model: Path) -> None:
    text = run_cli(["scan", evil_model])
    assert text.exit_code == 1, text.output
    _terminal_safe(text.stdout)
    assert f"tensor {escape(EVIL[1])} (F32" in text.stdout
    doc = json.loads(run_cli(["scan", evil_model, "--json"]).stdout)["models"][0]
    bad = [t for t in doc["tensors"] if t["findings"]]
    assert [t["name"] for t in bad] == [EVIL[1]]
    assert bad[0]["findings"][0]["column"] == 5


def test_rows_escapes_the_tensor_name(evil_model: Path) -> None:
    text = run_cli(["rows", evil_model, "--tensor", EVIL[0], "--ids", "0-3"])
    assert text.exit_code == 0, text.output
    _terminal_safe(text.stdout)
    assert f"tensor {escape(EVIL[0])}: Q8_0" in text.stdout
    doc = json.loads(run_cli(["rows", evil_model, "--tensor", EVIL[0], "--ids", "0-3", "--json"]).stdout)["models"][0]
    assert doc["tensor"] == EVIL[0]


def test_errors_naming_hostile_tensors_are_one_escaped_line(evil_model: Path, tmp_path: Path) -> None:
    dup = tmp_path / "dup.gguf"
    spec = TensorSpec(EVIL[2], T.F16, (8,), np.ones(8, "<f2").tobytes())
    write_gguf(dup, [spec, spec])
    line = assert_one_line_error(run_cli(["info", dup]), "duplicate tensor name")
    _terminal_safe(line)
    assert escape(EVIL[2]) in line
    line = assert_one_line_error(run_cli(["rows", evil_model, "--tensor", f"no{CLEAR}such"]))
    _terminal_safe(line)
    assert "\\x1b[2J" in line


def test_manifest_and_diff_output_is_escaped(evil_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "m.json"
    text = run_cli(["manifest", evil_model, "-o", out])
    assert text.exit_code == 0, text.output
    _terminal_safe(text.stdout)
    assert [t["name"] for t in json.loads(out.read_text())["tensors"]] == EVIL
    other = tmp_path / "other.gguf"
    data = bytearray(evil_model.read_bytes())
    data[-1] ^= 0xFF            # the last tensor's data differs
    other.write_bytes(bytes(data))
    diff = run_cli(["diff", evil_model, other])
    assert diff.exit_code == 1, diff.output
    _terminal_safe(diff.stdout)
    assert escape(EVIL[-1]) in diff.stdout


# --- checksum files ------------------------------------------------------------------------------------

def test_verify_sums_escapes_names_and_json_keeps_them(tmp_path: Path) -> None:
    # Windows file names cannot hold control characters; a bidi override is allowed and just as deceptive.
    name = f"m{CLEAR}\x07.gguf" if not WINDOWS else "m\u202egnp.gguf"
    (tmp_path / name).write_bytes(b"model bytes")
    good = hashlib.sha256(b"model bytes").hexdigest()
    sums = tmp_path / "SHA256SUMS"
    sums.write_text(f"{'0' * 64}  {name}\nSHA256 ({name}) = {good}\n", encoding="utf-8")
    text = run_cli(["verify", "--sums", sums])
    assert text.exit_code == 1, text.output
    _terminal_safe(text.stdout)
    assert f"({escape(name)})" in text.stdout
    doc = json.loads(run_cli(["verify", "--sums", sums, "--json"]).stdout)["models"][0]
    assert doc["mismatches"][0]["subject"] == name
    assert doc["checked"][1]["subject"] == name and doc["checked"][1]["ok"] is True


@pytest.mark.parametrize("line", ["../outside.gguf", "/etc/passwd", "sub/../../outside.gguf", "a\0b"])
def test_sums_names_leaving_the_folder_are_refused(line: str, tmp_path: Path) -> None:
    folder = tmp_path / "sums"
    folder.mkdir()
    (tmp_path / "outside.gguf").write_bytes(b"secret")
    sums = folder / "SHA256SUMS"
    sums.write_text(f"{hashlib.sha256(b'secret').hexdigest()}  {line}\n")
    with pytest.raises(ManifestError) as caught:
        read_sums(sums)
    assert caught.value.field == "line 1"
    result = run_cli(["verify", "--sums", sums])
    line_out = assert_one_line_error(result, str(sums), "line 1")
    assert "outside" in line_out or "leaves" in line_out


@needs_symlinks
def test_sums_symlink_pointing_out_is_refused_not_followed(tmp_path: Path) -> None:
    folder = tmp_path / "sums"
    folder.mkdir()
    outside = tmp_path / "outside.fifo"
    os.mkfifo(outside)          # following the link would block on the FIFO: a hang, not a pass
    (folder / "link.gguf").symlink_to(outside)
    sums = folder / "SHA256SUMS"
    sums.write_text(f"{'1' * 64}  link.gguf\n")
    # One reported entry (issue 11), not a refusal of the whole file; the link is never followed.
    result = run_cli(["verify", "--sums", sums])
    assert result.exit_code == 1 and result.stderr == "", (result.output, result.stderr)
    assert "MISMATCH link: " in result.stdout and "line 1: resolves outside" in result.stdout


def test_tensor_manifest_file_names_must_be_plain(tmp_path: Path, evil_model: Path) -> None:
    out = tmp_path / "m.json"
    assert run_cli(["manifest", evil_model, "-o", out]).exit_code == 0
    doc = json.loads(out.read_text())
    for bad in ("../evil.gguf", "/etc/passwd", "..", "a\\b"):
        doc["files"][0]["name"] = bad
        out.write_text(json.dumps(doc))
        with pytest.raises(ManifestError) as caught:
            read_tensor_manifest(out)
        assert caught.value.field == "files[0].name"


def test_tensor_manifest_names_are_escaped_in_verify_text(tmp_path: Path, evil_model: Path) -> None:
    out = tmp_path / "m.json"
    assert run_cli(["manifest", evil_model, "-o", out]).exit_code == 0
    doc = json.loads(out.read_text())
    ghost = f"ghost{CLEAR}\x07"
    doc["tensors"].append(dict(doc["tensors"][0], name=ghost))
    out.write_text(json.dumps(doc))
    text = run_cli(["verify", evil_model, "--manifest", out])
    assert text.exit_code == 1, text.output
    _terminal_safe(text.stdout)
    assert escape(ghost) in text.stdout
    report = json.loads(run_cli(["verify", evil_model, "--manifest", out, "--json"]).stdout)["models"][0]
    assert [m["tensor"] for m in report["mismatches"]] == [ghost]


# --- the Ollama store ------------------------------------------------------------------------------------

def _store(tmp_path: Path, layers: list[dict], name: str = "evil:latest") -> Path:
    store = tmp_path / "store"
    manifest = parse_ollama_name(name).manifest_path(store)
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": layers}))
    (store / "blobs").mkdir()
    return store


def test_ollama_digest_with_path_tricks_never_becomes_a_path(tmp_path: Path) -> None:
    for i, digest in enumerate(("sha256:../../../etc/passwd", "sha256:" + "a" * 63 + "/", "../" + "a" * 64,
                                "sha256:" + "A" * 63 + "\x1b")):
        store = _store(tmp_path / str(i), [{"mediaType": "application/vnd.ollama.image.model",
                                            "digest": digest, "size": 1}])
        result = run_cli(["verify", "ollama:evil", "--store", store])
        line = assert_one_line_error(result, "layers[0].digest")
        _terminal_safe(line)


def test_ollama_names_with_path_tricks_are_refused(tmp_path: Path) -> None:
    for name in ("../../etc", "a/../../b:tag", "host/ns/..:x", "/abs:tag", f"n{CLEAR}:t"):
        with pytest.raises(UsageError):
            parse_ollama_name(name)
        result = run_cli(["verify", f"ollama:{name}", "--store", tmp_path])
        _terminal_safe(assert_one_line_error(result))


def test_ollama_media_type_is_escaped_in_text(tmp_path: Path) -> None:
    media = f"application/x{CLEAR}\x07"
    store = _store(tmp_path, [{"mediaType": media, "digest": "sha256:" + "cd" * 32, "size": 3}])
    text = run_cli(["verify", "ollama:evil", "--store", store])
    assert text.exit_code == 1
    _terminal_safe(text.stdout)
    assert f"({escape(media)})" in text.stdout
    doc = json.loads(run_cli(["verify", "ollama:evil", "--store", store, "--json"]).stdout)["models"][0]
    assert doc["mismatches"][0]["subject"] == media


@needs_symlinks
def test_ollama_blob_symlink_out_of_the_store_is_reported_not_followed(tmp_path: Path) -> None:
    data = b"weights outside the store"
    digest = hashlib.sha256(data).hexdigest()
    outside = tmp_path / "outside.bin"
    outside.write_bytes(data)
    store = _store(tmp_path, [{"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}",
                               "size": len(data)}])
    (store / "blobs" / f"sha256-{digest}").symlink_to(outside)
    text = run_cli(["verify", "ollama:evil", "--store", store])
    assert text.exit_code == 1, text.output + text.stderr
    assert "MISMATCH link:" in text.stdout and "outside the store" in text.stdout
    assert not any(line.startswith("ok sha256") for line in text.stdout.splitlines())
    scan = run_cli(["scan", "ollama:evil", "--store", store])
    assert_one_line_error(scan, f"sha256-{digest}", "outside the store")


@needs_symlinks
def test_ollama_blob_symlink_inside_the_store_is_fine(tmp_path: Path) -> None:
    data = b"weights"
    digest = hashlib.sha256(data).hexdigest()
    store = _store(tmp_path, [{"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}",
                               "size": len(data)}])
    (store / "blobs" / "real").write_bytes(data)
    (store / "blobs" / f"sha256-{digest}").symlink_to(store / "blobs" / "real")
    text = run_cli(["verify", "ollama:evil", "--store", store])
    assert text.exit_code == 0, text.output + text.stderr


@needs_symlinks
def test_ollama_manifest_symlink_out_of_the_store_is_refused_not_followed(tmp_path: Path) -> None:
    data = b"weights"
    digest = hashlib.sha256(data).hexdigest()
    layers = [{"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}", "size": len(data)}]
    store = _store(tmp_path, layers)
    (store / "blobs" / f"sha256-{digest}").write_bytes(data)
    manifest = parse_ollama_name("evil:latest").manifest_path(store)
    outside = tmp_path / "planted-manifest"
    outside.write_text(manifest.read_text())
    manifest.unlink()
    manifest.symlink_to(outside)
    for command in (["verify", "ollama:evil"], ["scan", "ollama:evil"], ["info", "ollama:evil"]):
        assert_one_line_error(run_cli([*command, "--store", store]), str(manifest),
                              f"manifest is a link pointing outside the store: {outside}")
    # A tag that links to another tag's manifest in the same store is how aliases look: fine.
    manifest.unlink()
    alias = manifest.parent / "v1"
    alias.write_text(outside.read_text())
    manifest.symlink_to(alias)
    assert run_cli(["verify", "ollama:evil", "--store", store]).exit_code == 0


# --- the Hugging Face cache ---------------------------------------------------------------------------

@needs_symlinks
def test_hf_snapshot_link_out_of_the_cache_is_reported(tmp_path: Path) -> None:
    repo = tmp_path / "hub" / "models--org--name"
    commit = "0123456789abcdef0123456789abcdef01234567"
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    (repo / "blobs").mkdir()
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    outside = tmp_path / ("ab" * 32)
    outside.write_bytes(b"x")
    (snap / f"model{CLEAR}.gguf").symlink_to(outside)
    env = dict(os.environ, HF_HUB_CACHE=str(tmp_path / "hub"))
    text = CliRunner(env=env).invoke(main, ["verify", "hf:org/name"])
    assert text.exit_code == 1, text.output
    _terminal_safe(text.stdout)
    assert "MISMATCH link:" in text.stdout and "outside the cache" in text.stdout
    assert escape(f"model{CLEAR}.gguf") in text.stdout


# --- every part of an error line, invisible and bidi characters, undecodable bytes (issue 11) ----------

from ggaudit.errors import FormatError  # noqa: E402
from ggaudit.format.layout import open_model  # noqa: E402
from ggaudit.escaping import escape_message, escape_path  # noqa: E402

#: Characters that show as nothing, as a space or reorder the line: each must be visible as an escape.
INVISIBLE = [0x00AD, 0x034F, 0x061C, 0x115F, 0x1160, 0x180E, 0x200B, 0x200C, 0x200D, 0x200E, 0x200F,
             0x202A, 0x202E, 0x2060, 0x2061, 0x2062, 0x2063, 0x2064, 0x2066, 0x2069, 0x3164, 0xFE00, 0xFE0F,
             0xFEFF, 0xFFA0, 0x00A0, 0x2002, 0x3000, 0xE000, 0x0378, 0xE0001, 0xE0100, 0x2028, 0x2029]


@pytest.mark.parametrize("code", INVISIBLE, ids=lambda c: f"U+{c:04X}")
def test_invisible_and_bidi_characters_are_shown_as_escapes(code: int) -> None:
    shown = f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
    for escaper in (escape, escape_message, escape_path):
        assert escaper(f"a{chr(code)}b") == f"a{shown}b"
    # So two names that differ only by it never look the same.
    assert escape(f"a{chr(code)}b") != escape("ab")


def test_visible_text_of_any_script_is_left_as_it_is() -> None:
    for text in ("token_embd.weight", "模型.权重", "вес", "é", "e\u0301", "🙂", "a b"):
        assert escape(text) == escape_message(text) == text


@pytest.mark.parametrize("message, shown", [
    ("value \x1b]0;title\x07 here", "value \\x1b]0;title\\x07 here"),
    ("ends at \u202eexe.gguf", "ends at \\u202eexe.gguf"),
    ("two\nlines\r", "two\\nlines\\r"),
    # Already escaped (repr, escape()) or a Windows path: the message's backslashes are kept, once.
    (f"no tensor named {'a' + chr(27)!r}", "no tensor named 'a\\x1b'"),
    (f"tensor {escape('a' + chr(27))} twice", "tensor a\\x1b twice"),
    ("stored in C:\\models\\m.gguf", "stored in C:\\models\\m.gguf"),
])
def test_the_message_part_of_an_error_is_escaped_once(message: str, shown: str) -> None:
    err = ManifestError("m.json", message, field=f"files[0].name{CLEAR}")
    assert str(err) == f"m.json: files[0].name\\x1b[2J: {shown}"
    assert escape_message(escape_message(message)) == escape_message(message) == shown


def test_an_npz_member_name_in_an_error_reaches_the_terminal_escaped(tmp_path: Path) -> None:
    import io
    import zipfile

    model = tmp_path / "m.gguf"
    write_gguf(model, [TensorSpec("token_embd.weight", T.F32, (32, 4), bytes(512))])
    capture = tmp_path / "c.npz"
    member = "\x1b]0;title\x07"
    with zipfile.ZipFile(capture, "w") as z:
        ids = io.BytesIO()
        np.save(ids, np.arange(2))
        z.writestr("ids.npy", ids.getvalue())
        z.writestr(f"{member}.npy", b"not an array header")
    line = assert_one_line_error(run_cli(["rows", model, "--against", capture]), str(capture))
    _terminal_safe(line)
    assert "\u2028" not in line and "\\x1b]0;title\\x07" in line


@needs_symlinks
def test_a_link_target_quoted_in_a_message_is_escaped(tmp_path: Path) -> None:
    from ollama_support import ollama_store

    store = tmp_path / "store"
    write_gguf(tmp_path / "m.gguf", [TensorSpec("t", T.F32, (8,), bytes(32))])
    ollama_store(store, (tmp_path / "m.gguf").read_bytes(), b"", name="evil")
    manifest = next(p for p in (store / "manifests").rglob("*") if p.is_file())
    outside = tmp_path / f"out{CLEAR}\x1b]0;title\x07"
    outside.write_text(manifest.read_text())
    manifest.unlink()
    manifest.symlink_to(outside)
    line = assert_one_line_error(run_cli(["verify", "ollama:evil", "--store", store]), str(manifest))
    _terminal_safe(line)
    assert escape(str(outside)) in line


def _two_names(path: Path, first: bytes, second: bytes) -> Path:
    """A GGUF whose two tensors are named *first* and *second* exactly (invalid UTF-8 allowed)."""
    placeholders = ["@" * len(first), "#" * len(second)]
    write_gguf(path, [TensorSpec(name, T.F32, (8,), bytes(32)) for name in placeholders])
    data = path.read_bytes()
    for placeholder, raw in zip(placeholders, (first, second), strict=False):
        data = data.replace(placeholder.encode(), raw, 1)
    path.write_bytes(data)
    return path


def test_an_undecodable_byte_and_a_spelled_out_escape_look_different(tmp_path: Path) -> None:
    path = _two_names(tmp_path / "m.gguf", b"a\\xff", b"a\xff")
    # Two different names in the file: not a duplicate.
    assert [t.name for t in open_model(path).tensors] == ["a\\xff", "a\udcff"]
    result = run_cli(["info", path])
    assert result.exit_code == 0, result.stderr
    rows = [line.split()[0] for line in result.stdout.splitlines() if line.startswith("  a")]
    assert rows == ["a\\\\xff", "a\\xff"]
    names = [t["name"] for t in json.loads(run_cli(["info", "--json", path]).stdout)["models"][0]["tensors"]]
    assert names == ["a\\xff", "a\udcff"]       # exact: the byte is U+DCFF, as surrogateescape decodes it


@pytest.mark.parametrize("raw", [b"a\xff", b"\xc3", b"t\xed\xa0\x80"])
def test_the_same_undecodable_name_twice_is_still_a_duplicate(tmp_path: Path, raw: bytes) -> None:
    path = _two_names(tmp_path / "m.gguf", raw, raw)
    with pytest.raises(FormatError) as caught:
        open_model(path)
    shown = escape(raw.decode("utf-8", "surrogateescape"))
    assert caught.value.message == "duplicate tensor name"
    assert str(caught.value).endswith(f": tensor[{shown}]: duplicate tensor name") and "\\x" in shown
