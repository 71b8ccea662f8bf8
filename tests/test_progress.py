"""Progress on every long command (issue 14): one line on stderr, only on a terminal, never with -q.

The terminal is real: each command runs as ``python -m ggaudit`` with stderr on a pseudo-terminal
(os.openpty) and stdout on a pipe, on a 32 MiB sparse model (nothing is written but the header). The
same command with stderr on a pipe must print the same report and not one progress byte. The rate and
the time left are tested apart, with a clock the test moves.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType as T
from platforms import WINDOWS

from ggaudit.cli.progress import BYTES, MIN_BYTES, ROWS, Meter, RunProgress, size_text
from ggaudit.format.build import encode_kv, encode_tensor_info

MiB = 1 << 20
#: Rows of 4096 Q4_K columns (2304 bytes each): 32 MiB of tensor data. The first step of a command draws a
#: frame, so the size only needs to be real, not slow.
ROWS_BIG = 32 * MiB // 2304 // 8 * 8
TENSOR_BYTES = 2304 * ROWS_BIG
SHA_WRONG = "ab" * 32

needs_pty = pytest.mark.skipif(WINDOWS or not hasattr(os, "openpty"), reason="pseudo-terminals are POSIX-only")


# ----- the rate and the time left, on a clock the test moves --------------------------------------------

def test_no_time_left_until_the_rate_is_measured_over_time_and_bytes() -> None:
    meter = Meter()
    meter.sample(10.0, 0)                       # the first tick: where the measuring starts
    assert meter.eta(0, 10 << 30) is None
    # The old bar's first frame: a pool of readers starting, 1 MiB done after 0.1 s -> "ETA 10240s". Not now.
    meter.sample(10.1, MiB)
    assert (meter.rate, meter.eta(MiB, 10 << 30)) == (None, None)
    meter.sample(10.4, 400 * MiB)               # bytes enough, but not time enough
    assert meter.rate is None
    meter.sample(12.0, 400 * MiB + MIN_BYTES - 1)
    assert meter.rate == (400 * MiB + MIN_BYTES - 1) / 2.0     # from the first tick, over both conditions met
    assert meter.eta(1000, None) is None        # a total not known yet: no time left either


def test_a_slow_start_needs_enough_bytes_before_a_rate() -> None:
    meter = Meter()
    meter.sample(0.0, 0)
    meter.sample(5.0, MIN_BYTES - 1)            # seconds of start-up, a few bytes: no rate from that
    assert meter.rate is None
    meter.sample(5.5, 100 * MiB)
    assert meter.rate == pytest.approx(100 * MiB / 5.5)
    assert meter.eta(100 * MiB, 200 * MiB) == pytest.approx(5.5)


def test_the_rate_is_smoothed_and_follows_a_change() -> None:
    meter = Meter(smoothing=3.0)
    meter.sample(0.0, 0)
    meter.sample(1.0, 100 * MiB)
    assert meter.rate == 100 * MiB
    done, now = 100 * MiB, 1.0
    meter.sample(now + 0.1, done + 50 * MiB)    # a burst (cached files count done at once) moves it a little
    assert 100 * MiB < meter.rate < 200 * MiB
    done, now = done + 50 * MiB, now + 0.1
    for _ in range(300):                        # then 30 s at 10 MiB/s: it settles there
        done, now = done + MiB, now + 0.1
        meter.sample(now, done)
    assert meter.rate == pytest.approx(10 * MiB, rel=0.01)
    assert meter.eta(done, done + 100 * MiB) == pytest.approx(10.0, rel=0.01)


def test_rows_need_time_but_no_bytes() -> None:
    meter = Meter(min_amount=1)
    meter.sample(0.0, 0)
    meter.sample(0.5, 10)
    assert meter.rate == 20.0


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _bar(names: list[str], clock: _Clock, *, estimates: list[int | None] | None = None,
         unit: str = BYTES) -> tuple[RunProgress, io.StringIO]:
    stream = io.StringIO()
    return RunProgress("scan", names, enabled=True, estimates=estimates, unit=unit, stream=stream,
                       clock=clock), stream


def _frames(stream: io.StringIO) -> list[str]:
    return [frame.rstrip(" ") for frame in stream.getvalue().split("\r")]


def test_one_line_for_the_run_model_i_of_n_and_bytes_of_all_models(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    clock = _Clock()
    bar, stream = _bar(["a.gguf", "b.gguf"], clock, estimates=[300 * MiB, 700 * MiB])
    with bar.item() as tick:
        assert tick is not None
        tick(0, 200 * MiB)                      # a's own total replaces its estimate; b's still counts
        clock.now += 0.05
        tick(50 * MiB, 200 * MiB)               # within the redraw interval: not drawn
        clock.now += 0.55
        tick(100 * MiB, 200 * MiB)
        clock.now += 0.4
        tick(200 * MiB, 200 * MiB)
    with bar.item() as tick:
        assert tick is not None
        clock.now += 1.0
        tick(350 * MiB, 700 * MiB)
    bar.close()
    assert _frames(stream) == [
        "",
        "scan 1/2  a.gguf  0 B / 900.0 MiB  0%",
        # 100 MiB over 0.6 s since the first tick: 166.7 MiB/s, 800 MiB left.
        "scan 1/2  a.gguf  100.0 MiB / 900.0 MiB  11%  166.7 MiB/s  ETA 5s",
        # 250 MiB/s for 0.4 s moves it by 1 - exp(-0.4 / 3) of the way there.
        "scan 1/2  a.gguf  200.0 MiB / 900.0 MiB  22%  177.1 MiB/s  ETA 4s",
        "scan 2/2  b.gguf  550.0 MiB / 900.0 MiB  61%  226.1 MiB/s  ETA 2s",
        "",                                     # wiped: spaces over the longest frame
        "",
    ]
    assert stream.getvalue().endswith("\r" + " " * len("scan 2/2  b.gguf  550.0 MiB / 900.0 MiB  61%  226.1 MiB/s  "
                                                       "ETA 2s") + "\r")


def test_a_target_of_unknown_size_leaves_the_total_unknown_until_it_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    clock = _Clock()
    bar, stream = _bar(["a", "ollama:x"], clock, estimates=[MiB, None])
    with bar.item() as tick:
        assert tick is not None
        tick(0, MiB)
        tick(MiB, MiB)                          # within the redraw interval: counted, not drawn
    with bar.item() as tick:
        assert tick is not None
        clock.now += 1
        tick(0, 3 * MiB)
    assert _frames(stream)[1:] == ["scan 1/2  a  0 B", "scan 2/2  ollama:x  1.0 MiB / 4.0 MiB  25%"]


def test_the_line_fits_the_terminal_the_name_shortened_first(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock()
    name = "/models/" + "very-long-folder/" * 8 + "model\x1b[31m.gguf"
    bar, stream = _bar([name], clock)
    with bar.item() as tick:
        assert tick is not None
        for columns in (60, 40, 20):
            monkeypatch.setenv("COLUMNS", str(columns))
            clock.now += 1
            tick(5 * MiB, 10 * MiB)
    frames = _frames(stream)[1:]
    assert frames[0] == "scan  ...folder/model\\x1b[31m.gguf  5.0 MiB / 10.0 MiB  50%"
    assert len(frames[0]) == 59
    assert frames[1] == "scan  5.0 MiB / 10.0 MiB  50%"        # no room for the name
    assert frames[2] == "scan  5.0 MiB / 10."                  # cut to 19 columns, never wrapped
    assert all("\x1b" not in frame for frame in frames)


def _rows_bar(monkeypatch: pytest.MonkeyPatch) -> tuple[RunProgress, io.StringIO, _Clock]:
    """A rows run's line, 80 columns wide, on a clock the test moves."""
    monkeypatch.setenv("COLUMNS", "80")
    clock = _Clock()
    bar, stream = _bar(["m.gguf"], clock, unit=ROWS)
    bar.verb = "rows"
    return bar, stream, clock


def test_rows_each_pass_counted_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    bar, stream, clock = _rows_bar(monkeypatch)
    with bar.item() as tick:
        assert tick is not None
        bar.stage("buffered")
        tick(0, 4000)
        clock.now += 1
        tick(4000, 4000)
        bar.stage("mmap")
        clock.now += 1
        tick(1000, 4000)
    assert _frames(stream)[1:] == ["rows buffered  m.gguf  0 / 4,000 rows  0%",
                                   "rows buffered  m.gguf  4,000 / 4,000 rows  100%  4,000 rows/s  ETA 0s",
                                   "rows mmap  m.gguf  1,000 / 4,000 rows  25%"]


def test_nothing_after_close_and_nothing_when_disabled() -> None:
    clock = _Clock()
    bar, stream = _bar(["a"], clock)
    with bar.item() as tick:
        assert tick is not None
        bar.close()
        tick(1, 2)                              # a job thread still running after Ctrl-C
    assert stream.getvalue() == ""
    off = RunProgress("scan", ["a"], enabled=False, stream=stream)
    with off.item() as none:
        assert none is None
    off.close()
    assert stream.getvalue() == ""


def test_sizes_for_people() -> None:
    assert [size_text(n) for n in (512, 1536, 1023.96 * MiB, 5 << 40)] == ["512 B", "1.5 KiB", "1.0 GiB",
                                                                          "5.0 TiB"]


# ----- the library's callbacks: once per chunk, up to the total, results unchanged ------------------------

def _sparse_model(path: Path, rows: int) -> int:
    header = (b"GGUF" + (3).to_bytes(4, "little") + (1).to_bytes(8, "little") + (1).to_bytes(8, "little")
              + encode_kv("general.architecture", "test") + encode_tensor_info("w", T.Q4_K, (4096, rows), 0))
    header += bytes(-len(header) % 32)
    with open(path, "wb") as f:
        f.write(header)
        f.truncate(len(header) + 2304 * rows)
    return len(header) + 2304 * rows


def _recorder() -> tuple[list[tuple[int, int]], Callable[[int, int], None]]:
    calls: list[tuple[int, int]] = []
    return calls, lambda done, total: calls.append((done, total))


def test_verify_tells_bytes_hashed_and_a_cached_file_at_once(tmp_path: Path) -> None:
    import ggaudit

    size = _sparse_model(tmp_path / "m.gguf", 8192)       # 18 MiB: three 8 MiB chunks
    sha = hashlib.sha256((tmp_path / "m.gguf").read_bytes()).hexdigest()
    time.sleep(0.15)        # past the window in which the digest cache does not trust fresh stamps
    calls, progress = _recorder()
    report = ggaudit.verify(tmp_path / "m.gguf", sha256=sha, cache=tmp_path / "cache", progress=progress)
    assert report.ok and report.stats.cached == 0
    assert calls == [(0, size), (8 * MiB, size), (16 * MiB, size), (size, size)]
    calls.clear()
    again = ggaudit.verify(tmp_path / "m.gguf", sha256=sha, cache=tmp_path / "cache", trust_cache=True,
                           progress=progress)
    assert again.stats.cached == 1 and calls == [(0, size), (size, size)]
    assert ggaudit.verify(tmp_path / "m.gguf", sha256=sha).checked == report.checked   # the same without


def test_manifest_and_diff_tell_their_bytes_and_give_the_same_results(tmp_path: Path) -> None:
    import ggaudit

    size = _sparse_model(tmp_path / "a.gguf", 8192)
    _sparse_model(tmp_path / "b.gguf", 8192)
    calls, progress = _recorder()
    built = ggaudit.build_manifest(tmp_path / "a.gguf", progress=progress)
    assert built == ggaudit.build_manifest(tmp_path / "a.gguf")
    assert calls[0] == (0, size) and calls[-1] == (size, size) and len(calls) == 4
    calls.clear()
    compared = ggaudit.diff(tmp_path / "a.gguf", tmp_path / "b.gguf", progress=progress)
    data = 2304 * 8192
    step = 4 * MiB // 2304 * 2304                  # diff's chunks: whole rows, about 4 MiB
    assert calls[0] == (0, data) and calls[-1] == (data, data) and len(calls) == 1 + -(-data // step)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)
    plain = ggaudit.diff(tmp_path / "a.gguf", tmp_path / "b.gguf")
    assert (compared.identical, compared.data_diffs) == (plain.identical, plain.data_diffs) == (("w",), ())


def test_check_tells_the_bytes_of_every_read_path_as_one_count(tmp_path: Path) -> None:
    import ggaudit

    size = _sparse_model(tmp_path / "m.gguf", 4096)       # 9 MiB: two chunks of each path
    calls, progress = _recorder()
    report = ggaudit.check(tmp_path / "m.gguf", modes=("buffered", "mmap"), progress=progress)
    assert calls[0] == (0, 2 * size) and calls[-1] == (2 * size, 2 * size)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls) and {t for _, t in calls} == {2 * size}
    plain = ggaudit.check(tmp_path / "m.gguf", modes=("buffered", "mmap"))
    assert (report.verdict, report.conclusions) == (plain.verdict, plain.conclusions) == (
        "unverified", report.conclusions)


# ----- the commands, on a real terminal -------------------------------------------------------------------

@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("progress")
    for name in ("a.gguf", "b.gguf"):
        header = (b"GGUF" + (3).to_bytes(4, "little") + (1).to_bytes(8, "little") + (1).to_bytes(8, "little")
                  + encode_kv("general.architecture", "test")
                  + encode_tensor_info("token_embd.weight", T.Q4_K, (4096, ROWS_BIG), 0))
        header += bytes(-len(header) % 32)
        with open(folder / name, "wb") as f:
            f.write(header)
            f.truncate(len(header) + TENSOR_BYTES)     # all-zero blocks: finite
    return folder


def _ggaudit(folder: Path, args: list[str], *, tty: bool) -> tuple[int, str, bytes]:
    """Run ggaudit in ``folder``: (exit status, stdout, what reached stderr), stderr a terminal or a pipe."""
    env = {**os.environ, "COLUMNS": "100"}
    if not tty:
        proc = subprocess.run([sys.executable, "-m", "ggaudit", *args], cwd=folder, capture_output=True, env=env,
                              timeout=120)
        return proc.returncode, proc.stdout.decode(), proc.stderr
    leader, follower = os.openpty()
    try:
        with subprocess.Popen([sys.executable, "-m", "ggaudit", *args], cwd=folder, stdout=subprocess.PIPE,
                              stderr=follower, env=env) as proc:
            os.close(follower)
            follower = -1
            err = b""
            while True:
                try:
                    chunk = os.read(leader, 1 << 16)
                except OSError:     # EIO: every holder of the terminal's far end is gone
                    break
                if not chunk:
                    break
                err += chunk
            assert proc.stdout is not None
            out = proc.stdout.read().decode()
            code = proc.wait(timeout=120)
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)
    return code, out, err


#: A frame: a carriage return, then the line (no line feed before the wipe).
_FRAME = re.compile(rb"\r([^\r\n]+?) *(?=\r)")


def _progress_frames(err: bytes, verb: str) -> list[str]:
    """The frames drawn, after checking the last is wiped (spaces over the longest) before anything else."""
    frames = [m.group(1).decode() for m in _FRAME.finditer(err) if m.group(1).strip()]
    assert frames and all(f.startswith(verb) for f in frames), err[:300]
    wipe = b"\r" + b" " * max(len(f) for f in frames) + b"\r"
    assert wipe in err
    assert err.index(wipe) + len(wipe) == err.rindex(b"\r") + 1    # nothing drawn after the wipe
    assert all(len(f) <= 99 for f in frames)                        # COLUMNS=100, one column spare
    return frames


def _same_report(tty_out: str, pipe_out: str) -> None:
    seconds = re.compile(r"\d+\.\d+ s\b")      # rows says how long each path took
    assert seconds.sub("S", tty_out) == seconds.sub("S", pipe_out)
    assert "\r" not in tty_out


COMMANDS = {
    "verify": (["verify", "a.gguf", "--sha256", SHA_WRONG, "--no-cache"], 1),
    "manifest": (["manifest", "a.gguf", "-o", "-"], 0),
    "manifest-llama": (["manifest", "a.gguf", "-o", "-", "--manifest-format", "llama-gguf-hash"], 0),
    "diff": (["diff", "a.gguf", "b.gguf"], 0),
    "scan": (["scan", "a.gguf", "b.gguf"], 0),
    "rows": (["rows", "a.gguf", "--random", "600", "--seed", "7", "--modes", "buffered,mmap"], 0),
}


@needs_pty
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_progress_on_a_terminal_and_never_in_a_pipe(big: Path, command: str) -> None:
    args, status = COMMANDS[command]
    code, out, err = _ggaudit(big, args, tty=True)
    assert code == status, err
    frames = _progress_frames(err, args[0])
    assert "ETA" not in frames[0]                   # the first frame never guesses the time left
    piped_code, piped_out, piped_err = _ggaudit(big, args, tty=False)
    assert piped_code == status
    _same_report(out, piped_out)
    assert b"\r" not in piped_err and piped_err == err[err.rindex(b"\r") + 1:].replace(b"\r\n", b"\n")
    if command == "scan":                           # one line for the run: model i of 2, bytes of both
        both = re.escape(size_text(TENSOR_BYTES + (big / "b.gguf").stat().st_size))   # a's data, b's file as a guess
        assert re.match(rf"scan 1/2  a\.gguf  [\d.]+ (MiB|B) / {both}", frames[0]), frames[0]
    elif command == "rows":
        assert frames[0].startswith("rows buffered  a.gguf  ") and " / 600 rows" in frames[0]
    else:
        assert frames[0] == f"{args[0]}  a.gguf  0 B / {size_text(TENSOR_BYTES)}  0%"


@needs_pty
def test_check_progress_counts_every_byte_of_every_path(tmp_path: Path) -> None:
    size = _sparse_model(tmp_path / "a.gguf", 1024)
    args = ["check", "a.gguf", "--modes", "buffered,mmap"]
    code, out, err = _ggaudit(tmp_path, args, tty=True)
    assert code == 0, err
    frames = _progress_frames(err, "check")
    assert frames[0] == f"check  a.gguf  0 B / {size_text(2 * size)}  0%"
    assert out.startswith("a.gguf: unverified") and "\r" not in out     # the report holds no frame


@needs_pty
@pytest.mark.parametrize("command", ["verify", "scan"])
def test_quiet_draws_nothing_on_a_terminal(big: Path, command: str) -> None:
    args, status = COMMANDS[command]
    code, _, err = _ggaudit(big, [*args, "-q"], tty=True)
    assert code == status
    assert b"\r" not in err.replace(b"\r\n", b"\n")


@needs_pty
def test_json_on_stdout_holds_no_frame(big: Path) -> None:
    import json

    code, out, err = _ggaudit(big, ["verify", "a.gguf", "--sha256", SHA_WRONG, "--no-cache", "--json"], tty=True)
    assert code == 1
    _progress_frames(err, "verify")
    assert json.loads(out)["models"][0]["stats"]["bytes_hashed"] == big.joinpath("a.gguf").stat().st_size


def test_rows_whole_file_passes_count_bytes_and_the_next_pass_rows_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The published digest's whole-file reads (ggaudit.rows.digest_proof) are named "MODE whole file" and
    counted in bytes; the line says so, and the replay's next pass counts rows again."""
    from ggaudit.cli.rows import _by_read_path

    bar, stream, clock = _rows_bar(monkeypatch)
    with bar.item() as tick:
        assert tick is not None
        told = _by_read_path(bar, tick)
        told("direct", 4000, 4000)
        clock.now += 1
        told("direct whole file", 5 << 20, 10 << 20)
        clock.now += 1
        told("buffered", 1000, 4000)
    assert _frames(stream)[1:] == ["rows direct  m.gguf  4,000 / 4,000 rows  100%",
                                   "rows direct whole file  m.gguf  5.0 MiB / 10.0 MiB  50%",
                                   "rows buffered  m.gguf  1,000 / 4,000 rows  25%"]
