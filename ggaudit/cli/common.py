"""What every command shares: error handling, exit codes, stderr warnings. Output is cli/reporters'."""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import sys
import traceback
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from ..outcomes import STATUS_CLEAN, STATUS_ERROR, STATUS_FINDINGS
from ..errors import GGAuditError, Param, caused_by_ctrl_c
from ..escaping import escape_message, escape_path
from ..untrusted import shorten

# The exit status is the library's overall status: one definition of what 0, 1 and 2 mean.
EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = STATUS_CLEAN, STATUS_FINDINGS, STATUS_ERROR
#: A bug in ggaudit (an exception that is not a report about the input): never mistaken for findings.
EXIT_INTERNAL = 3
#: The result could not be written (stdout or ``-o FILE``: a full disk, a failing device): the check ran,
#: but its verdict never reached the reader, so it is neither a verdict (0, 1) nor a word on the input (2).
EXIT_OUTPUT = 4
#: Ctrl-C, as a shell reports a process that SIGINT ended (128 + 2).
EXIT_INTERRUPTED = 130

#: Longest text of an internal error's message that is quoted: enough to recognise it, never megabytes.
MAX_INTERNAL_MESSAGE = 200

F = TypeVar("F", bound=Callable[..., Any])
R = TypeVar("R")

log = logging.getLogger(__name__)


class OutputError(Exception):
    """Writing the run's result to ``where`` (``stdout``, or the ``-o`` file's path) failed: exit
    :data:`EXIT_OUTPUT`. Not an OSError, so that nothing takes it for an unreadable input."""

    def __init__(self, where: str, err: OSError, what: str = "the output") -> None:
        super().__init__(f"cannot write {what} to {where}: {escape_message(str(err.strerror or err))}")


@contextlib.contextmanager
def writing_to(path: str, what: str) -> Iterator[None]:
    """Within the block, an OSError (raised while ``what`` is written to the file ``path``: a full disk,
    EIO) is an :class:`OutputError` naming it; the checks of ``path`` before it raise UsageErrors."""
    try:
        yield
    except GGAuditError:    # also an OSError when the OS gave one: the input's error, not the output's
        raise
    except OSError as err:
        raise OutputError(escape_path(path), err, what) from err


class OneLineErrorsGroup(click.Group):
    """A command group whose commands report bad arguments (a MODEL that is a directory, an unreadable
    --sums file, a missing option) as one line on stderr with exit 2, like every other error."""

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        # Ctrl-C while the arguments are parsed ends in exit 130 too, not click's "Aborted!" and exit 1;
        # --help and --version write here, as the commands do later.
        with _quiet_broken_pipes():
            return guarded(lambda: super(OneLineErrorsGroup, self).make_context(info_name, args, parent, **extra))

    def invoke(self, ctx: click.Context) -> Any:
        with _quiet_broken_pipes():
            try:
                return guarded(lambda: super(OneLineErrorsGroup, self).invoke(ctx))
            except click.UsageError as err:
                where = f" (see '{err.ctx.command_path} --help')" if err.ctx is not None else ""
                # The message quotes the paths the user typed: shown as paths (Windows' separator once).
                fail(escape_path(err.format_message()) + where)


if TYPE_CHECKING:
    _StrParam = click.ParamType[str]
else:   # click 8.2, which pyproject allows, has no generic ParamType
    _StrParam = click.ParamType


class PathParam(_StrParam):
    """A path option or argument, checked only for being a folder or not. click.Path quotes the path with
    repr(), which doubles every Windows backslash; this says it as ``PATH: is a directory``."""

    name = "path"

    def __init__(self, *, file_okay: bool = True, dir_okay: bool = True) -> None:
        self.file_okay, self.dir_okay = file_okay, dir_okay

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        path = os.fsdecode(value)
        if not self.dir_okay and os.path.isdir(path):
            self.fail(f"{path}: is a directory", param, ctx)
        if not self.file_okay and os.path.exists(path) and not os.path.isdir(path):
            self.fail(f"{path}: is not a directory", param, ctx)
        return path


def handle_errors(func: F) -> F:
    """Run a command under :func:`guarded`: one line on stderr and the documented exit status for every way
    it can fail, never a traceback."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return guarded(lambda: func(*args, **kwargs))

    return wrapper  # type: ignore[return-value]


def guarded(call: Callable[[], R]) -> R:
    """The one place that maps how a run ends to its exit status: bad input or an unreadable file is one
    line and exit 2, as is a dependency ggaudit declares that cannot be imported (saying how to install it);
    Ctrl-C is exit 130, and any other exception is a bug in ggaudit: one line asking for a report and exit 3
    (the traceback too with ``ggaudit --debug``). click's own exits pass through."""
    try:
        return call()
    except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort):
        raise
    except OutputError as err:
        output_failed(err)
    except GGAuditError as err:
        fail(str(as_flags(err)))
    except OSError as err:
        fail(_describe_os_error(err))
    except MemoryError:
        fail("out of memory")
    except KeyboardInterrupt:
        interrupted()
    except ImportError as err:  # a dependency missing or broken is the installation's to fix, not a bug
        from .dependencies import missing_dependency     # here: only a failed import pays for it

        missing = missing_dependency(err)
        if missing is None:
            internal_error(err)
        fail(missing)
    except Exception as err:  # anything else is a bug, reported as one
        if caused_by_ctrl_c(err):
            interrupted()
        internal_error(err)


def output_failed(err: OutputError) -> NoReturn:
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, _QuietOnBrokenPipe) and stream.failed is not None:
            # What it could not write is still buffered: the flush at exit would fail on it again
            # ("Exception ignored ... OSError", exit 120). The run says it once, here.
            with contextlib.suppress(OSError, ValueError):
                stream.to_null_device()
    with contextlib.suppress(OutputError, OSError):     # stderr may be on the full disk too: the status says it
        click.echo(f"ggaudit: error: {err}", err=True)
    sys.exit(EXIT_OUTPUT)


def interrupted() -> NoReturn:
    click.echo("ggaudit: interrupted", err=True)
    sys.exit(EXIT_INTERRUPTED)


#: The library's parameters that an option of the command line sets: its errors name the parameter
#: (``max_abs: must be ...``, ``give manifest=``), the command line names the option the user typed
#: (``--max-abs: ...``, ``give --manifest``).
FLAGS = {"tensors": "--tensor", "tensor": "--tensor", "as_fp8": "--as", "max_abs": "--max-abs", "limit": "--limit",
         "seed": "--seed", "random": "--random", "group_bytes": "--group-bytes", "jobs": "--jobs",
         "store": "--store", "manifest": "--manifest", "sums": "--sums", "against": "--against",
         "modes": "--modes", "workers": "--workers", "batch": "--batch", "cache_rows": "--cache-rows",
         "prefetch": "--prefetch", "fp8": "--fp8", "all_rows": "--all", "page_crossing": "--page-crossing",
         "sha256": "--sha256", "base": "--base", "ignore_missing": "--ignore-missing", "anomalies": "--anomalies"}


def as_flags(err: GGAuditError) -> GGAuditError:
    """``err`` with its field, and each parameter its message names, said as the command line's option, where
    one sets that parameter (of its class still: a missing file's error is still a FileNotFoundError)."""
    flag = FLAGS.get(err.field or "")
    if flag is None and not any(isinstance(word, Param) for word in err.words):
        return err
    return err.said_as(_option, err.field if flag is None else flag)


def _option(param: Param) -> str:
    """A parameter a library message names, as the option that sets it (a value given is the option's own)."""
    return FLAGS.get(param.name, str(param))


def internal_error(err: BaseException) -> NoReturn:
    """Report a bug in ggaudit as one line on stderr (the traceback before it with --debug); exit 3."""
    if _debug():
        click.echo("".join(traceback.format_exception(type(err), err, err.__traceback__)).rstrip("\n"), err=True)
    text = shorten(str(err), MAX_INTERNAL_MESSAGE)
    what = type(err).__name__ + (f": {escape_message(text)}" if text else "")
    hint = "" if _debug() else "; run with --debug for the traceback"
    click.echo(f"ggaudit: internal error: {what} (a bug in ggaudit: please report it with the command that "
               f"ran{hint})", err=True)
    sys.exit(EXIT_INTERNAL)


def _debug() -> bool:
    ctx = click.get_current_context(silent=True)
    return ctx is not None and bool(ctx.find_root().params.get("debug"))


def _describe_os_error(err: OSError) -> str:
    where = escape_path(str(err.filename)) + ": " if err.filename is not None else ""
    return f"{where}{escape_message(str(err.strerror or err))}"


def fail(message: str) -> NoReturn:
    """Print *message* as the one error line on stderr and exit 2."""
    click.echo(f"ggaudit: error: {message}", err=True)
    sys.exit(EXIT_ERROR)


class _QuietOnBrokenPipe:
    """A standard stream that, once the reader of its pipe has gone (``ggaudit ... | head -1``), sends the
    rest of the output to the null device: the run ends as it would have, with its own exit status, and
    neither "Broken pipe" nor a failed flush at exit is reported (the Python docs' recipe, applied at
    the first write that fails rather than by ending the run). Any other failed write (a full disk) is
    an :class:`OutputError` naming the stream, raised again by every later write: a caller that swallows
    one (click probes a stream with ``write("")``) cannot make the run end as if it had been written."""

    def __init__(self, stream: Any, name: str) -> None:
        self._stream, self._name = stream, name
        self.failed: OutputError | None = None

    def write(self, text: Any) -> int:
        if self.failed is not None:
            raise self.failed
        try:
            return int(self._stream.write(text))
        except OSError as err:
            self._silence_or_raise(err)
            return len(text)

    def flush(self) -> None:
        if self.failed is not None:
            raise self.failed
        try:
            self._stream.flush()
        except OSError as err:
            self._silence_or_raise(err)

    def _silence_or_raise(self, err: OSError) -> None:
        # Windows reports a write to a pipe whose reader closed as EINVAL as well as EPIPE.
        if not (isinstance(err, BrokenPipeError) or (os.name == "nt" and err.errno == errno.EINVAL)):
            self.failed = OutputError(self._name, err)
            raise self.failed from err
        try:
            self.to_null_device()
        except (OSError, ValueError):
            raise err from None   # no descriptor to redirect (a test's captured stream): say so

    def to_null_device(self) -> None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self._stream.fileno())
        finally:
            os.close(devnull)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def _quiet_broken_pipes() -> Iterator[None]:
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = (stream if stream is None else _QuietOnBrokenPipe(stream, name)
                              for stream, name in zip(saved, ("stdout", "stderr"), strict=True))
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def stderr_is_tty() -> bool:
    return sys.stderr.isatty()


def hint(message: str) -> None:
    """A warning (less was checked than asked, say) on stderr: always, terminal or not, since a warning
    dropped from a log is a check the reader believes was made. Only progress is for terminals."""
    click.echo(message, err=True)


def expand_models(specs: Iterable[str], store: str | None) -> list[str]:
    """Each MODEL as the files it names: ``ollama:NAME`` becomes its model blob and then its projector's,
    if it has one; the shards of one split set, each named, are the one model. A name that does not
    resolve is kept as it is, so auditing it reports the error."""
    from ..stores.locate import distinct_models, resolve_model

    paths: list[str] = []
    for spec in specs:
        try:
            paths.extend(resolve_model(spec, store=store))
        except GGAuditError:
            paths.append(spec)
    return distinct_models(paths)


def model_inputs(spec: str, store: str | None) -> list[str]:
    """The files a run on MODEL ``spec`` reads, as far as they are known before it reads any model: the
    GGUF file(s) ``spec`` names (for ``ollama:NAME``, after reading its manifest), every shard of their
    split set (found by name, as the set is opened), and the Ollama manifest. A name that does not
    resolve adds only itself: the run says what is wrong with it. For ``-o FILE``, which none may be."""
    from ..stores.locate import description_files, resolve_model

    found = [spec]
    with contextlib.suppress(GGAuditError, OSError):
        found.extend(description_files(spec, store=store))
    try:
        paths = resolve_model(spec, store=store)
    except (GGAuditError, OSError):
        return found
    return found + [shard for path in paths for shard in split_set_files(path)]


def split_set_files(path: str) -> list[str]:
    """``path`` and, when its name is a split set's shard's (``NAME-0000k-of-0000n.gguf``), every shard of
    that set, by name: the files opening it reads, known without reading any."""
    from ..format.layout import named_shards

    return [path, *(named_shards(path) or ())]


#: The help of every command's --store: the one option says where each store a MODEL names is.
STORE_HELP = ("Root of the store MODEL names: Ollama's (default: $OLLAMA_MODELS or the platform default), "
              "LM Studio's or GPT4All's models folder.")

