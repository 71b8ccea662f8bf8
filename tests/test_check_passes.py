"""check's direct pass runs beside the page-cache passes (ggaudit.check.passes.beside): both results come back,
a failure of the foreground stops the background at its next chunk, and the first error in the planned order
is the one raised."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from ggaudit.check.passes import beside
from ggaudit.evidence.paths import CACHE_CHUNK_BYTES as CHUNK_BYTES
from ggaudit.evidence.read_pass import PassStats, PassStopped, read_pass
from ggaudit.errors import ReadError
from ggaudit.evidence.readers import open_reader


class Offsets:
    """A chunk consumer that records each chunk's offset; with ``release``, it says it has its first chunk
    (``first``) and holds every chunk until ``release`` is set."""

    def __init__(self, release: threading.Event | None = None) -> None:
        self.offsets: list[int] = []
        self.release, self.first = release, threading.Event()

    def update(self, offset: int, data: memoryview) -> None:
        self.first.set()
        if self.release is not None:
            self.release.wait()
        self.offsets.append(offset)


@pytest.fixture
def ten_chunks(tmp_path: Path) -> Path:
    path = tmp_path / "ten.bin"
    path.write_bytes(bytes(range(256)) * (10 * CHUNK_BYTES // 256))
    return path


def test_both_results_come_back_background_first(ten_chunks: Path) -> None:
    seen = Offsets()

    def background(stop: threading.Event) -> PassStats:
        with open_reader(str(ten_chunks), "buffered") as reader:
            return read_pass(reader, [seen], stop=stop)

    stats, here = beside(background, lambda: "foreground")
    assert (stats.mode, stats.bytes, here) == ("buffered", 10 * CHUNK_BYTES, "foreground")
    assert seen.offsets == [i * CHUNK_BYTES for i in range(10)]


def test_a_failing_foreground_stops_the_background_at_its_next_chunk(ten_chunks: Path) -> None:
    stopped: list[BaseException] = []
    seen = Offsets()

    def background(stop: threading.Event) -> None:
        seen.release = stop         # its consumer holds the ring's chunks until the foreground has failed
        with open_reader(str(ten_chunks), "buffered") as reader:
            try:
                read_pass(reader, [seen], stop=stop)
            except PassStopped as err:
                stopped.append(err)
                raise

    def foreground() -> None:
        assert seen.first.wait(60)  # the background pass is under way
        raise ReadError(str(ten_chunks), "buffered read failed: Input/output error", offset=4096)

    with pytest.raises(ReadError, match="Input/output error"):
        beside(background, foreground)
    # The reader got at most the ring's three chunks ahead of its held consumer, then stopped at the next.
    assert 1 <= len(seen.offsets) <= 3 and seen.offsets == [i * CHUNK_BYTES for i in range(len(seen.offsets))]
    assert [str(e) for e in stopped] == [f"buffered pass stopped at offset {len(seen.offsets) * CHUNK_BYTES}"]


def test_a_failing_background_is_raised_once_the_foreground_has_finished() -> None:
    finished: list[str] = []

    def background(stop: threading.Event) -> None:
        raise ReadError("model.gguf", "direct read of 8388608 bytes failed: Input/output error", offset=0)

    def foreground() -> None:
        finished.append("buffered")

    with pytest.raises(ReadError, match="direct read of 8388608 bytes failed"):
        beside(background, foreground)
    assert finished == ["buffered"]
