"""What a chat template is given in ggaudit's sandbox (issue 33): the filters and globals chat engines
provide (harmless and bounded), size guards on everything that makes big values, and a handful of
representative conversations, shaped like what transformers, llama.cpp and vLLM pass, so that the
template's branches for system prompts, tools, tool calls (arguments as a dict and as JSON text), tool
results, reasoning, documents and multi-part content all run. Each call builds fresh objects: a render
never sees another's."""

from __future__ import annotations

import datetime
import functools
import json
import re
from collections.abc import Callable, Iterable
from typing import Any, cast

from jinja2.exceptions import TemplateError
from jinja2.utils import Namespace, pass_environment

__all__ = ["GLOBALS", "MAX_ITEMS", "MAX_TEXT", "Unbounded", "contexts", "filters"]

#: Characters of any string a template makes (and of each render's output).
MAX_TEXT = 1_000_000
#: Elements of a range or list a template makes (jinja2's sandbox MAX_RANGE).
MAX_ITEMS = 100_000
#: Bits of an integer a template makes (``10 ** 10 ** 10`` would take hours of C code).
MAX_INT_BITS = 100_000
#: Characters of a ``tojson`` indent.
MAX_INDENT = 64
#: The date strftime_now shows: renders are deterministic.
NOW = datetime.datetime(2025, 1, 1, 12, 0, 0)


class Unbounded(Exception):
    """The render exceeded its budget. ``line``: the template line, when no template frame is in the
    traceback (the output, counted outside the template's code)."""

    def __init__(self, why: str, line: int | None = None) -> None:
        super().__init__(why)
        self.line = line


# ----- sizes ---------------------------------------------------------------------------------------

def weight(value: Any, per_level: int = 0, limit: int = MAX_TEXT) -> int:
    """About how many characters ``value`` becomes as text (a list shared twice counts twice), plus
    ``per_level`` per nesting level of each element (an indent); counting stops past ``limit``."""
    total, stack = 0, [(value, 0)]
    while stack and total <= limit:
        item, depth = stack.pop()
        total += depth * per_level + _own_size(item)
        stack.extend((child, depth + 1) for child in _children(item))
    return total


def _own_size(item: Any) -> int:
    if isinstance(item, (str, bytes, bytearray)):
        return len(item)
    if isinstance(item, int):
        return item.bit_length() // 3 + 1
    return 2 + len(item) if isinstance(item, (list, tuple, dict, set, frozenset)) else 8


def _children(item: Any) -> Iterable[Any]:
    if isinstance(item, (list, tuple, set, frozenset)):
        return item
    if isinstance(item, dict):
        return [*item.keys(), *item.values()]
    if isinstance(item, Namespace):
        return [vars(item).get("_Namespace__attrs", {})]
    return ()


def check_size(size: int, what: str, limit: int = MAX_TEXT) -> None:
    if size > limit:
        raise Unbounded(f"{what} of more than {limit} characters or elements")


def check_spec(spec: str) -> None:
    """A format spec's width or precision (``{:>1000000000}``, ``%.1000000000f``) within MAX_TEXT."""
    for digits in re.findall(r"\d+", spec):
        check_size(int(digits) if len(digits) < 12 else MAX_TEXT + 1, "a format width")


def _occurrences(text: Any, char: str) -> int:
    return int(text.count(char if isinstance(text, str) else char.encode()))


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _check_mul(left: Any, right: Any) -> None:
    if _is_int(left) and _is_int(right):
        check_size(left.bit_length() + right.bit_length(), "an integer (bits)", MAX_INT_BITS)
        return
    seq, count = (left, right) if _is_int(right) else (right, left)
    if _is_int(count) and isinstance(seq, (str, bytes, list, tuple)):
        check_size(max(count, 0) * weight(seq), f"{type(seq).__name__} * {count}")


def _check_pow(left: Any, right: Any) -> None:
    if _is_int(left) and _is_int(right) and right > 0 and abs(left) > 1:
        check_size(left.bit_length() * min(right, MAX_INT_BITS + 1), "an integer (bits)", MAX_INT_BITS)


def _check_add(left: Any, right: Any) -> None:
    if type(left) is str and type(right) is str:    # most of a template's additions: their lengths are their size
        check_size(len(left) + len(right), "str + str")
    elif isinstance(left, (str, bytes, list, tuple)) and isinstance(right, (str, bytes, list, tuple)):
        check_size(weight(left) + weight(right), f"{type(left).__name__} + {type(right).__name__}")


def check_percent(left: Any, right: Any) -> None:
    """``text % args``: each conversion at most the biggest argument, widths within MAX_TEXT."""
    if not isinstance(left, (str, bytes)):
        return
    check_spec(" ".join(re.findall(r"%[^a-zA-Z%]*", left if isinstance(left, str) else left.decode("latin-1"))))
    args = right.values() if isinstance(right, dict) else right if isinstance(right, tuple) else (right,)
    biggest = max((weight(a) for a in args), default=0)
    check_size(len(left) + _occurrences(left, "%") * biggest, "text % arguments")


#: The size check of each intercepted operator (run before it is computed).
BINOP_SIZES: dict[str, Callable[[Any, Any], None]] = {"*": _check_mul, "**": _check_pow, "+": _check_add,
                                                      "%": check_percent}


def finalize(value: Any) -> Any:
    """Every ``{{ expression }}`` before it becomes text: a list printed is its repr, shared parts and all."""
    if not isinstance(value, str):
        check_size(weight(value), "an expression's text")
    return value


def concat(parts: Iterable[Any]) -> str:
    """jinja2's join of a block's output (``{% set x %}...{% endset %}``, macros), summed before joining."""
    pieces = [p if isinstance(p, str) else str(p) for p in parts]
    check_size(sum(map(len, pieces)), "a block's output")
    return "".join(pieces)


def _join_parts(join: Callable[..., str]) -> Callable[..., str]:
    """jinja2's ``~`` (str_join, markup_join), its operands weighed before they become text."""
    def joined(seq: Iterable[Any]) -> str:
        items = list(seq)
        check_size(sum(weight(i) for i in items), "a ~ concatenation")
        return join(items)
    return joined

def patch_joins(namespace: dict[str, Any]) -> None:
    """Replace the generated code's ``str_join``/``markup_join`` (imported names: no environment hook) and its
    ``concat``: jinja2 3.1 binds it to ``environment.concat``, but 3.0 imports jinja2's own, and a block doubling
    itself 30 times would make 2 GB before the output's size is looked at."""
    for name in ("str_join", "markup_join"):
        if name in namespace:
            namespace[name] = _join_parts(namespace[name])
    if "concat" in namespace:
        namespace["concat"] = concat


# ----- methods that make big values ------------------------------------------------------------------

def _arg(args: tuple[Any, ...], kwargs: dict[str, Any], index: int, name: str, default: Any = None) -> Any:
    return args[index] if len(args) > index else kwargs.get(name, default)


def _width(text: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    width = _arg(args, kwargs, 0, "width", 0)
    return int(width) if _is_int(width) else 0


def _expandtabs(text: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    size = _arg(args, kwargs, 0, "tabsize", 8)
    return len(text) + _occurrences(text, "\t") * (int(size) if _is_int(size) else 8)


def _join(sep: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    items = _arg(args, kwargs, 0, "iterable", ())
    if not isinstance(items, (list, tuple, str, dict)):
        return 0        # an iterator: reading it here would leave nothing for the method
    return sum(weight(i) for i in items) + len(sep) * max(len(items) - 1, 0)


def replaced_size(text: Any, old: Any, new: Any, count: Any = None) -> int:
    if not isinstance(text, (str, bytes)) or type(old) is not type(text) or type(new) is not type(text):
        return 0
    text = cast(Any, text)
    found = int(text.count(old)) if old else len(text) + 1
    if _is_int(count) and count >= 0:
        found = min(found, count)
    return len(text) + found * max(len(new) - len(old), 0)


def _replace(text: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    return replaced_size(text, _arg(args, kwargs, 0, "old"), _arg(args, kwargs, 1, "new"),
                         _arg(args, kwargs, 2, "count"))


def _translate(text: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    table = _arg(args, kwargs, 0, "table")
    values = table.values() if isinstance(table, dict) else ()
    return len(text) * max([1, *(weight(v) for v in values)])


def _to_bytes(number: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    length = _arg(args, kwargs, 0, "length", 1)
    return int(length) if _is_int(length) else 0


#: Predicted result sizes of the methods that can make a result much bigger than their object.
_TEXT_METHODS: dict[str, Callable[[Any, tuple[Any, ...], dict[str, Any]], int]] = {
    "center": _width, "ljust": _width, "rjust": _width, "zfill": _width, "expandtabs": _expandtabs,
    "join": _join, "replace": _replace, "translate": _translate}
_METHOD_GUARDS: dict[type, dict[str, Callable[[Any, tuple[Any, ...], dict[str, Any]], int]]] = {
    str: _TEXT_METHODS, bytes: _TEXT_METHODS, bytearray: _TEXT_METHODS, int: {"to_bytes": _to_bytes}}


def method_guard(obj: Any, name: str) -> Callable[[tuple[Any, ...], dict[str, Any]], int] | None:
    """The size predictor of ``obj.name(...)``, when that method can make a big value."""
    for kind, table in _METHOD_GUARDS.items():
        if isinstance(obj, kind) and name in table:
            predict = table[name]
            return lambda args, kwargs: predict(obj, args, kwargs)
    return None


Predictor = Callable[[tuple[Any, ...], dict[str, Any]], int]


def guarded(method: Callable[..., Any], predict: Predictor) -> Callable[..., Any]:
    """``method`` with the size of its result predicted (and checked) before it runs."""
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            size = predict(args, kwargs)
        except (TypeError, ValueError, AttributeError):
            size = 0        # arguments the method itself refuses: it raises
        check_size(size, f"{getattr(method, '__name__', 'a method')}() result")
        return method(*args, **kwargs)
    return call


# ----- the filters and globals engines provide ---------------------------------------------------------

def raise_exception(message: object = "") -> None:
    """transformers' and llama.cpp's: the template refuses the conversation."""
    raise TemplateError(str(message))


def strftime_now(fmt: str = "%Y-%m-%d") -> str:
    check_size(len(fmt) * 16, "strftime_now() result")
    return NOW.strftime(str(fmt))


def tojson(value: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
           sort_keys: bool = False) -> str:
    """transformers' tojson (its keyword arguments; not HTML-escaped)."""
    step = indent if _is_int(indent) else len(indent) if isinstance(indent, str) else 0
    check_size(step, "a tojson indent", MAX_INDENT)
    check_size(weight(value, per_level=max(step, 0) + 1) * 2, "tojson() result")
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def from_json(text: Any) -> Any:
    """DeepSeek V3.2/V4's: the value a JSON text holds."""
    return json.loads(text)


def safe_range(*args: Any) -> range:
    numbers = range(*args)
    check_size(len(numbers), "range()", MAX_ITEMS)
    return numbers


def lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:
    """jinja2's lipsum, deterministic (no random module) and bounded."""
    words = int(n) * int(max)
    check_size(words * 6, "lipsum() result")
    paragraph = " ".join(["lorem"] * int(max)) + "."
    return "\n\n".join([f"<p>{paragraph}</p>" if html else paragraph] * int(n))


GLOBALS: dict[str, Any] = {"raise_exception": raise_exception, "strftime_now": strftime_now, "range": safe_range,
                           "lipsum": lipsum}


def _indent_size(text: Any, width: Any = 4, *_: Any, **__: Any) -> int:
    step = width if _is_int(width) else len(width) if isinstance(width, str) else 0
    return len(text) + (text.count("\n") + 1) * step if isinstance(text, str) else 0


def _wordwrap_size(text: Any, width: Any = 79, _long: Any = True, wrapstring: Any = None, *_: Any, **kw: Any) -> int:
    wrap = kw.get("wrapstring", wrapstring) or "\n"
    width = int(kw.get("width", width)) if _is_int(kw.get("width", width)) else 0
    if not isinstance(text, str):
        return 0
    lines = len(text) // max(width, 1) + text.count("\n") + 1
    return int(len(text) + lines * len(str(wrap)))


def _join_size(value: Any, d: Any = "", *_: Any, **kw: Any) -> int:
    if not isinstance(value, (list, tuple, str, dict)):
        return 0        # an iterator: reading it here would leave nothing for the filter
    return sum(weight(v) for v in value) + len(str(kw.get("d", d))) * max(len(value) - 1, 0)


def _fill_size(value: Any, count: Any = 1, fill_with: Any = None, *_: Any, **kw: Any) -> int:
    """batch() and slice() make ``count`` items (or lists) when filling."""
    return count if _is_int(count) and (kw.get("fill_with", fill_with) is not None or kw.get("slices")) else 0


def _format_size(value: Any, *args: Any, **kwargs: Any) -> int:
    check_percent(str(value), kwargs if kwargs else tuple(args))
    return 0


def _replace_size(text: Any, old: Any = "", new: Any = "", count: Any = None, *_: Any, **__: Any) -> int:
    return replaced_size(text, str(old), str(new), count) if isinstance(text, str) else 0


#: jinja2 filters that can make a result much bigger than their input: the size each would make.
_FILTER_SIZES: dict[str, tuple[Callable[..., int], int]] = {
    "center": (lambda text, width=80, *_, **kw: kw.get("width", width) if _is_int(kw.get("width", width)) else 0,
               MAX_TEXT),
    "indent": (_indent_size, MAX_TEXT), "wordwrap": (_wordwrap_size, MAX_TEXT), "join": (_join_size, MAX_TEXT),
    "replace": (_replace_size, MAX_TEXT), "format": (_format_size, MAX_TEXT),
    "batch": (_fill_size, MAX_ITEMS), "slice": (_fill_size, MAX_ITEMS),
    "string": (lambda value, *_, **__: weight(value), MAX_TEXT),
    "pprint": (lambda value, *_, **__: 2 * weight(value, per_level=1), MAX_TEXT),
}


def _size_checked(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    """``original`` (keeping jinja2's pass_context/pass_environment mark) with its size checked first."""
    predict, limit = _FILTER_SIZES[name]
    skip = 1 if hasattr(original, "jinja_pass_arg") else 0

    def checked(*args: Any, **kwargs: Any) -> Any:
        try:
            size = predict(*args[skip:], **kwargs)
        except (TypeError, ValueError, AttributeError):
            size = 0        # arguments the filter itself refuses: it raises
        check_size(size, f"{name}() result", limit)
        return original(*args, **kwargs)

    return functools.update_wrapper(checked, original)


@pass_environment
def _attr(environment: Any, obj: Any, name: Any) -> Any:
    """``|attr(name)`` through the environment's getattr (jinja2's reads the attribute before asking)."""
    return environment.getattr(obj, str(name))


@pass_environment
def _random(environment: Any, seq: Any) -> Any:
    """``|random``, deterministic: the first item."""
    items = list(seq)[:1]
    return items[0] if items else environment.undefined("No random item, sequence was empty.")


def _items(value: Any) -> Any:
    """jinja2 3.1's ``|items`` (3.0 lacks it)."""
    return iter(value.items()) if hasattr(value, "items") else iter(())


def filters(builtin: dict[str, Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
    """The filters to put over jinja2's: size-checked, harmless, and what engines add."""
    made = {name: _size_checked(name, builtin[name]) for name in _FILTER_SIZES if name in builtin}
    added: dict[str, Callable[..., Any]] = {"tojson": tojson, "from_json": from_json, "attr": _attr,
                                            "random": _random}
    return {"items": _items, **made, **added} if "items" not in builtin else {**made, **added}


# ----- the conversations ------------------------------------------------------------------------------

_WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city."},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
_ARGUMENTS = {"city": "Paris", "unit": "celsius"}
_DOCUMENTS = [{"title": "Paris", "text": "Paris is the capital of France."},
              {"title": "Weather", "text": "It is often mild in spring."}]


def _tool_call(arguments: object) -> dict[str, Any]:
    return {"id": "call_0001", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}


def _chat() -> list[dict[str, Any]]:
    return [{"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Hello, who are you?"},
            {"role": "assistant", "content": "I am an assistant."},
            {"role": "user", "content": "What can you do?"}]


def _tool_use(arguments: object, reasoning: bool) -> list[dict[str, Any]]:
    call: dict[str, Any] = {"role": "assistant", "content": "", "tool_calls": [_tool_call(arguments)]}
    if reasoning:
        call["reasoning_content"] = "The user wants the weather; I call the tool."
    return [{"role": "system", "content": "You can call tools."},
            {"role": "user", "content": "What is the weather in Paris?"},
            call,
            {"role": "tool", "tool_call_id": "call_0001", "name": "get_weather", "content": '{"temperature": 21}'},
            {"role": "assistant", "content": "It is 21 degrees in Paris."},
            {"role": "user", "content": "Thanks!"}]


def _multipart() -> list[dict[str, Any]]:
    return [{"role": "user", "content": [{"type": "text", "text": "Describe the weather."}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Sunny."}]},
            {"role": "user", "content": [{"type": "text", "text": "And tomorrow?"}]}]


def _common(bos: str, eos: str, generation: bool) -> dict[str, Any]:
    return {"bos_token": bos, "eos_token": eos, "add_generation_prompt": generation,
            "date_string": "01 Jan 2025", "tools_in_user_message": True, "chat_template_kwargs": {}}


def contexts(bos: str, eos: str) -> tuple[dict[str, Any], ...]:
    """The render contexts, in a fixed order (findings are deterministic)."""
    return (
        {**_common(bos, eos, True), "messages": _chat()},
        {**_common(bos, eos, False), "messages": _chat()[1:], "enable_thinking": False},
        {**_common(bos, eos, True), "messages": _tool_use(_ARGUMENTS, reasoning=False), "tools": [_WEATHER_TOOL],
         "custom_tools": [_WEATHER_TOOL], "builtin_tools": ["code_interpreter"]},
        {**_common(bos, eos, True), "messages": _tool_use(json.dumps(_ARGUMENTS), reasoning=True),
         "tools": [_WEATHER_TOOL], "enable_thinking": True, "reasoning_effort": "medium", "documents": _DOCUMENTS},
        {**_common(bos, eos, True), "messages": _multipart()},
        {**_common(bos, eos, False), "messages": _chat()[1:2]},     # one message: embedding templates
    )
