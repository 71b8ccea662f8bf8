"""Chat templates rendered in an instrumented jinja2 sandbox (issue 33): what a static check of names cannot
see. Templates build names at run time (``{% set u = '_' * 2 %}{{ ''[u ~ 'class' ~ u] }}`` reaches os.popen
under a plain jinja2.Environment: CVE-2024-34359), ``str.format`` walks attributes, ``map(attribute=...)``
too, and a loop whose bound is computed can run for ever.

Each template is rendered with a few representative conversations (``inputs``) in an
``ImmutableSandboxedEnvironment`` whose hooks record every attribute and call the template attempts that the
sandbox refuses, then refuse it: the attribute is never read (a name starting with ``_`` is refused before
Python's ``getattr``, unlike jinja2's own sandbox, which reads it first), the call never made. Each distinct
attempt (template line, what) is a ``render-blocked`` error. A budget bounds the render: template lines run
(a trace function on the template's own code), time, output and the size of every string, list and integer
the template makes (checked before it is made). Exceeding it is an ``unbounded`` error at the line where the
render stopped. A render that fails in an ordinary way (an undefined name, ``raise_exception``) is a
template refusing an input: no finding.

Methods that modify a list, dict or set (Kimi K2 appends to a list) are refused as the immutable sandbox
refuses them, without a finding: they reach nothing outside the template's own data.
"""

from __future__ import annotations

import inspect
import sys
import time
import types
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from jinja2 import nodes
from jinja2.exceptions import SecurityError
from jinja2.runtime import Context, Undefined
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedFormatter, is_internal_attribute, \
    modifies_known_mutable

from . import inputs as engine
from .finding import TemplateText, TemplateFinding
from .inputs import contexts
from .syntax import EXTENSIONS, OPTIONS

__all__ = ["MAX_LINES", "MAX_SECONDS", "MAX_TEXT", "RENDER_BLOCKED", "UNBOUNDED", "render_findings"]

RENDER_BLOCKED: Final = "render-blocked"
UNBOUNDED: Final = "unbounded"
ERROR = "error"
#: Template lines a template may run over all its renders (a real one runs a few thousand).
MAX_LINES = 200_000
#: Seconds a template's renders may take together (a real one takes milliseconds).
MAX_SECONDS = 0.5
#: Characters of any string a template makes, and of each render's output.
MAX_TEXT = engine.MAX_TEXT
#: The file name of the template's generated code: its frames are the ones traced and located.
FILENAME = "<ggaudit chat template>"
_CALLS_PER_CLOCK = 256      # Python calls between two looks at the clock outside the template's code


class _Refused(Undefined):
    """What a refused attribute gives the template: using it ends the render (SecurityError)."""


@dataclass
class _Audit:
    """One template's audit: what it attempted, and the budget it has left (shared by its renders)."""

    template: Any = None
    blocked: dict[tuple[int, str], tuple[str, str]] = field(default_factory=dict)
    deadline: float = 0.0

    def line_of(self, frame: types.FrameType | None) -> int | None:
        """The template line the innermost template frame at or above ``frame`` is at."""
        while frame is not None and frame.f_code.co_filename != FILENAME:
            frame = frame.f_back
        return None if frame is None or self.template is None else \
            int(self.template.get_corresponding_lineno(frame.f_lineno))

    def block(self, what: str, name: str, why: str) -> None:
        """Record an attempt the sandbox refuses, where the template is (none while compiling: jinja2 folds
        constants then, and the same attempt is met again at render time)."""
        line = self.line_of(sys._getframe(1))
        if line is not None:
            self.blocked.setdefault((line, what), (name, why))


# ----- what the sandbox refuses, as tables ---------------------------------------------------------

_UNDERSCORE = ("a name starting with _, the way out of a template into Python (CVE-2024-34359): the sandbox "
               "refuses it")
_INTERNAL = "an attribute of Python's internals (frames, code, type.mro): the sandbox refuses it"
_UNSAFE_CALL = "a callable that runs code outside the template (processes, files, imports): the sandbox refuses it"
#: Modules whose functions a template must never call (none is reachable without an attribute refused first).
_UNSAFE_MODULES = frozenset(("os", "posix", "nt", "subprocess", "sys", "shutil", "socket", "importlib", "ctypes",
                             "pty", "io", "pickle", "marshal", "code", "codeop", "runpy"))
_UNSAFE_BUILTINS = frozenset(("eval", "exec", "compile", "open", "__import__", "getattr", "setattr", "delattr",
                              "globals", "locals", "vars", "breakpoint", "input", "exit", "quit", "help"))


def _attribute_refusal(obj: Any, name: str) -> str | None:
    """Why the sandbox refuses ``obj.name`` (decided from the name and the object's type, before reading)."""
    if name.startswith("_"):
        return _UNDERSCORE
    if is_internal_attribute(obj, name):
        return _INTERNAL
    return None


def _call_refusal(obj: Any) -> tuple[str, str] | None:
    """(what, why) when ``obj`` is a callable the sandbox must not call."""
    if getattr(obj, "unsafe_callable", False) or getattr(obj, "alters_data", False):
        return f"call of {obj!r}", "a callable marked unsafe: the sandbox refuses it"
    if not isinstance(obj, (types.BuiltinFunctionType, types.FunctionType)):
        return None
    module = str(getattr(obj, "__module__", None) or "")
    if module.partition(".")[0] in _UNSAFE_MODULES or (module == "builtins" and obj.__name__ in _UNSAFE_BUILTINS):
        return f"call of {module}.{obj.__qualname__}", _UNSAFE_CALL
    return None


def _has_attribute(obj: Any, name: str) -> bool:
    """Whether ``obj`` has ``name``, found in the type's and instance's dictionaries: no descriptor, property
    or ``__getattr__`` runs."""
    return inspect.getattr_static(obj, name, _MISSING) is not _MISSING


_MISSING = object()


# ----- the environment ------------------------------------------------------------------------------

class _Formatter(SandboxedFormatter):
    """``str.format`` in the sandbox (fields reach attributes through the environment's hooks), its
    output counted as it is made."""

    def __init__(self, env: _AuditEnvironment) -> None:
        super().__init__(env)
        self.made = 0

    def format_field(self, value: Any, format_spec: str) -> Any:
        engine.check_spec(format_spec)
        self.made += engine.weight(value) + len(format_spec)
        engine.check_size(self.made, "str.format() output")
        return super().format_field(value, format_spec)


class _AuditEnvironment(ImmutableSandboxedEnvironment):
    """transformers' chat environment, its hooks recording what the sandbox refuses."""

    #: Operators that make big values, computed by ``call_binop`` (and so never folded at compile time).
    intercepted_binops = frozenset(engine.BINOP_SIZES)
    #: The join of a block's output (``{% set x %}``, macros), its size checked first.
    concat = staticmethod(engine.concat)

    def __init__(self, audit: _Audit) -> None:
        super().__init__(finalize=engine.finalize, optimized=False, extensions=list(EXTENSIONS), **OPTIONS)
        self.audit = audit
        self.filters.update(engine.filters(self.filters))
        self.globals.update(engine.GLOBALS)

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        return _attribute_refusal(obj, attr) is None and not modifies_known_mutable(obj, attr)

    def getattr(self, obj: Any, attribute: str) -> Any:
        if _attribute_refusal(obj, attribute) is None:
            try:
                value = getattr(obj, attribute)
            except AttributeError:
                return self._item(obj, attribute)
            return self._allowed(obj, attribute, value)
        return self._refuse(obj, attribute, self._item)

    def getitem(self, obj: Any, argument: Any) -> Any:
        try:
            return obj[argument]
        except (TypeError, LookupError):
            pass
        if not isinstance(argument, str):
            return self.undefined(obj=obj, name=argument)
        if _attribute_refusal(obj, argument) is None:
            try:
                value = getattr(obj, argument)
            except AttributeError:
                return self.undefined(obj=obj, name=argument)
            return self._allowed(obj, argument, value)
        return self._refuse(obj, argument, lambda o, a: self.undefined(obj=o, name=a))

    def _item(self, obj: Any, name: str) -> Any:
        try:
            return obj[name]
        except (TypeError, LookupError):
            return self.undefined(obj=obj, name=name)

    def _refuse(self, obj: Any, name: str, missing: Callable[[Any, str], Any]) -> Any:
        """A refused name: when ``obj`` has no such attribute jinja2 falls back (an item, or undefined);
        else the attempt is recorded (not on what a refusal gave: the first refusal is the finding)."""
        if not _has_attribute(obj, name):
            return missing(obj, name)
        if not isinstance(obj, _Refused):
            self.audit.block(f"attribute {name!r} of {type(obj).__name__}", name,
                             _attribute_refusal(obj, name) or _INTERNAL)
        return self.unsafe_undefined(obj, name)

    def _allowed(self, obj: Any, name: str, value: Any) -> Any:
        if modifies_known_mutable(obj, name):
            return self.unsafe_undefined(obj, name)
        if isinstance(obj, str) and name in ("format", "format_map"):
            return self._format(obj, name == "format_map")
        guard = engine.method_guard(obj, name)
        return value if guard is None else engine.guarded(value, guard)

    def _format(self, text: str, is_map: bool) -> Callable[..., str]:
        def format_(*args: Any, **kwargs: Any) -> str:
            if is_map and (kwargs or len(args) != 1):
                raise TypeError("format_map() takes exactly one argument")
            positional, named = ((), args[0]) if is_map else (args, kwargs)
            return type(text)(_Formatter(self).vformat(text, positional, named))
        return format_

    def unsafe_undefined(self, obj: Any, attribute: str) -> Undefined:
        return _Refused(f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe.",
                        name=attribute, obj=obj, exc=SecurityError)

    def call(self, context: Context, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        refusal = _call_refusal(obj)
        if refusal is not None:
            self.audit.block(refusal[0], getattr(obj, "__name__", ""), refusal[1])
            raise SecurityError(f"{obj!r} is not safely callable")
        return context.call(obj, *args, **kwargs)

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        engine.BINOP_SIZES[operator](left, right)
        return self.binop_table[operator](left, right)


# ----- the budget -----------------------------------------------------------------------------------

def _tracer(audit: _Audit) -> Callable[..., Any]:
    """A trace function counting the lines the template's code runs (only its frames get a line tracer)
    and watching the clock; it ends the render (engine.Unbounded) when either is spent."""
    lines, calls = MAX_LINES, 0

    def line(frame: types.FrameType, event: str, arg: Any) -> Any:
        nonlocal lines
        if event == "line":
            lines -= 1
            if lines < 0:
                raise engine.Unbounded(f"more than {MAX_LINES} template lines run")
            if not lines & 1023:
                _check_clock(audit)
        return line

    def call(frame: types.FrameType, event: str, arg: Any) -> Any:
        nonlocal calls
        if frame.f_code.co_filename == FILENAME:
            return line
        calls += 1
        if not calls % _CALLS_PER_CLOCK:
            _check_clock(audit)
        return None

    return call


def _check_clock(audit: _Audit) -> None:
    if time.perf_counter() > audit.deadline:
        raise engine.Unbounded(f"more than {MAX_SECONDS} s of rendering")


def _render(audit: _Audit, context: dict[str, Any]) -> None:
    """One render, its output counted as it is made."""
    template = audit.template
    made = 0
    render = template.root_render_func(template.new_context(context))
    for chunk in render:
        made += len(chunk)
        if made > MAX_TEXT:
            raise engine.Unbounded(f"the output of more than {MAX_TEXT} characters", audit.line_of(render.gi_frame))


@dataclass(frozen=True)
class _Stop:
    """Where and why the budget ended the renders."""

    line: int
    why: str


def _stop_line(audit: _Audit, err: BaseException) -> int:
    """The template line an exception stopped the render at: the innermost template frame; for a recursion,
    the line most of its frames are at (the innermost depends on how deep the caller's stack was)."""
    if isinstance(err, engine.Unbounded) and err.line is not None:
        return err.line
    lines = [audit.line_of(tb.tb_frame) for tb in _traceback(err) if tb.tb_frame.f_code.co_filename == FILENAME]
    found = [n for n in lines if n is not None]
    if not found:
        return 1
    if isinstance(err, RecursionError):
        return Counter(found).most_common(1)[0][0]
    return found[-1]


def _traceback(err: BaseException) -> Iterator[types.TracebackType]:
    tb = err.__traceback__
    while tb is not None:
        yield tb
        tb = tb.tb_next


_STOPS: dict[type[BaseException], Callable[[BaseException], str]] = {
    engine.Unbounded: str,
    RecursionError: lambda err: "recursion deeper than Python's limit",
    MemoryError: lambda err: "memory exhausted",
}


def _render_all(audit: _Audit, inputs: tuple[dict[str, Any], ...]) -> _Stop | None:
    """Every render, under the trace function (the caller's is restored); the first stop ends them all."""
    previous = sys.gettrace()
    audit.deadline = time.perf_counter() + MAX_SECONDS
    sys.settrace(_tracer(audit))
    try:
        for context in inputs:
            try:
                _render(audit, context)
            except (engine.Unbounded, RecursionError, MemoryError) as err:
                return _Stop(_stop_line(audit, err), _STOPS[type(err)](err))
            except Exception:
                continue
    finally:
        sys.settrace(previous)
    return None


# ----- findings -------------------------------------------------------------------------------------

def _column(src: TemplateText, line: int, name: str) -> int:
    """Where on ``line`` the template names ``name`` (or its core, for a name it builds: ``'class'``)."""
    start = src.starts[min(line, len(src.starts)) - 1]
    end = src.starts[line] if line < len(src.starts) else len(src.text)
    text = src.text[start:end]
    for needle in (name, name.strip("_")):
        if needle and (at := text.find(needle)) >= 0:
            return start + at
    return start


def _findings(src: TemplateText, audit: _Audit, stop: _Stop | None) -> Iterator[TemplateFinding]:
    for (line, what), (name, why) in audit.blocked.items():
        yield src.finding(_column(src, line, name), RENDER_BLOCKED, ERROR, what, f"the template attempts {what}: "
                          f"{why}")
    if stop is not None:
        yield src.finding(_column(src, stop.line, ""), UNBOUNDED, ERROR, stop.why,
                          f"the render does not end within its budget ({stop.why}): an engine rendering this "
                          "template hangs or exhausts memory")


def _compile(audit: _Audit, source: str | nodes.Template) -> bool:
    try:
        env = _AuditEnvironment(audit)
        code = env.compile(source, filename=FILENAME)
        audit.template = env.template_class.from_code(env, code, env.make_globals(None))
        engine.patch_joins(audit.template.root_render_func.__globals__)
    except Exception:
        return False
    return True


def render_contexts(path: str, key: str, text: str, inputs: tuple[dict[str, Any], ...],
                    value_offset: int = 0, *, tree: nodes.Template | None = None) -> tuple[TemplateFinding, ...]:
    """The findings of rendering ``text`` with ``inputs`` (render_findings' inputs, or a test's); ``tree``: its
    syntax tree when the caller parsed it already (:func:`ggaudit.format.templates.syntax.parse`), else the
    text is parsed here."""
    audit = _Audit()
    try:
        if not _compile(audit, text if tree is None else tree):
            return ()
        stop = _render_all(audit, inputs)
    except (RecursionError, MemoryError):
        return ()
    src = TemplateText(path, key, text, value_offset)
    return tuple(sorted(_findings(src, audit, stop), key=lambda f: (f.line, f.column, f.rule, f.seen)))


def render_findings(path: str, key: str, text: str, value_offset: int = 0, *, bos: str = "<s>",
                    eos: str = "</s>", tree: nodes.Template | None = None) -> tuple[TemplateFinding, ...]:
    """Render one chat template with representative conversations in an instrumented sandbox: a
    ``render-blocked`` error for each distinct attempt the sandbox refused, an ``unbounded`` error when the
    render exceeds its budget. ``bos``/``eos``: the file's tokens. Never raises; renders nothing unsafe."""
    return render_contexts(path, key, text, contexts(bos, eos), value_offset, tree=tree)

