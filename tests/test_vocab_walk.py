"""Opening a model walks a vocabulary's strings with numpy when it is loaded (format.layout's
_walk_short_strings): the walk must land exactly where the one-string-at-a-time walk does, whatever the
lengths (short, 255/256 bytes, long, empty), the bytes inside (runs of zeros that look like headers),
and wherever the read window's edges fall; and hostile lengths must fail as before."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from ggaudit.errors import FormatError
from ggaudit.format import layout
from ggaudit.format.blocks import GGUFValueType as V
from ggaudit.format.build import TensorSpec, Typed, write_gguf


def _vocabulary(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    pieces = []
    for _ in range(n):
        shape = rng.random()
        if shape < 0.70:
            pieces.append("".join(rng.choice("abc\u2581\u65e5") for _ in range(rng.randint(1, 12))))
        elif shape < 0.80:
            pieces.append("\x00" * rng.randint(1, 20))              # zeros that look like a header
        elif shape < 0.86:
            pieces.append("")
        elif shape < 0.93:
            pieces.append("y" * rng.choice([255, 256, 257, 300, 4000]))
        else:
            pieces.append("\x00" * 7 + chr(rng.randint(1, 127)) + "\x00" * rng.randint(0, 9))
    return pieces


def _model(path: Path, seed: int, n: int) -> Path:
    tokens = _vocabulary(seed, n)
    write_gguf(path, [TensorSpec("w", T.F32, (4,), np.ones(4, np.float32).tobytes())],
               {"general.architecture": "t", "tokenizer.ggml.tokens": tokens,
                "tokenizer.ggml.scores": Typed(V.FLOAT32, [0.5] * n, True), "after": "the end"})
    return path


def _opened(path: Path) -> tuple[object, ...]:
    m = layout.open_model(path)
    f = m.files[0]
    return (f.header_end, f.data_offset, tuple((k, v.offset, v.nbytes) for k, v in m.metadata.items()),
            m.metadata["after"].value, tuple((t.name, t.offset) for t in m.tensors))


@pytest.mark.parametrize("chunk", [4096, 65536, 1 << 20])
@pytest.mark.parametrize("seed", range(6))
def test_numpy_walk_lands_where_the_string_by_string_walk_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              seed: int, chunk: int) -> None:
    path = _model(tmp_path / "m.gguf", seed, 6000)
    monkeypatch.setattr(layout, "_CHUNK", chunk)
    monkeypatch.setattr(layout, "_VECTOR_MIN_STRINGS", 10**9)
    expected = _opened(path)
    monkeypatch.setattr(layout, "_VECTOR_MIN_STRINGS", 1)
    walked: list[int] = []
    real = layout._walk_short_strings

    def counting(np_: object, buf: bytes, rel: int, left: int) -> tuple[int, int]:
        result = real(np_, buf, rel, left)
        walked.append(result[1])
        return result

    monkeypatch.setattr(layout, "_walk_short_strings", counting)
    assert _opened(path) == expected
    assert sum(walked) > 3000      # the numpy walk did most of it


def test_walk_stops_at_a_string_that_leaves_the_window() -> None:
    # Three strings of 3 bytes, then one whose length runs past the buffer: it is left to the checked loop.
    buf = b"".join(len(s).to_bytes(8, "little") + s for s in (b"abc", b"def", b"ghi")) + (50).to_bytes(8, "little")
    assert layout._walk_short_strings(np, buf + b"x" * 10, 0, 10) == (33, 3)
    assert layout._walk_short_strings(np, buf, 0, 2) == (22, 2)
    assert layout._walk_short_strings(np, buf[:5], 0, 2) == (0, 0)


@pytest.mark.parametrize("length", [2**63, 2**40, 17 << 20])
def test_hostile_length_in_a_long_vocabulary_is_the_same_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               length: int) -> None:
    path = _model(tmp_path / "m.gguf", 1, 5000)
    data = bytearray(path.read_bytes())
    at = layout.open_model(path).metadata["tokenizer.ggml.tokens"].offset + 12   # the first string's header
    for _ in range(4000):                                                   # the 4001st string
        at += 8 + int.from_bytes(data[at:at + 8], "little")
    data[at:at + 8] = length.to_bytes(8, "little")
    path.write_bytes(bytes(data))
    errors = []
    for threshold in (10**9, 1):
        monkeypatch.setattr(layout, "_VECTOR_MIN_STRINGS", threshold)
        with pytest.raises(FormatError) as caught:
            layout.open_model(path)
        errors.append(str(caught.value))
    assert errors[0] == errors[1]
    assert f"offset {at}" in errors[0]
