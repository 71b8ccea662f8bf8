"""A record's JSON and its JSON Schema from one description: the frozen dataclass itself.

Each field is a key, in the order the fields are declared; its annotation gives the key's type in the
schema (``int``, ``str | None``, ``tuple[Checked, ...]``, another such record), and :func:`json_key` adds what
a type cannot say (an enum, a minimum, a pattern, digits to round to). :func:`to_json` writes a record by
that description and :func:`schema_of` gives its schema, so a field is written once: a key cannot be in
the JSON and missing from the schema, or typed one way in each (tests/test_json_schema.py compares the
shipped schema with :func:`schema_defs`; ``python scripts/derive_schema.py`` writes it).

A record is declared with ``@json_record`` (a frozen dataclass, keyword-only unless told otherwise, that type
checkers read as one with :func:`json_key` as its field specifier). One named in the schema's ``$defs`` says so
with ``JSON_DEF``; one without is written inline where
it is used. A report (a record whose JSON is a document of its own) also has ``SCHEMA``, its id, and its
JSON begins with ``schema``, ``tool_version`` and ``ok``: :func:`report_json`.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar, Union, cast

from ._version import __version__

__all__ = ["json_key", "json_record", "report_json", "schema_defs", "schema_of", "to_json"]

_META = "json"

if TYPE_CHECKING:
    from typing_extensions import dataclass_transform
else:
    def dataclass_transform(**_: Any) -> Any:     # typing has it from Python 3.11 on; it only informs checkers
        return lambda f: f


class _Record(Protocol):
    def to_json(self) -> dict[str, Any]: ...


class _Named(Protocol):
    JSON_DEF: ClassVar[str]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Key:
    """What a field's annotation cannot say about its key: ``values`` (an enum, None among them for a value
    that may be null; or a function giving them when the schema is made, for values a registry holds),
    ``limits`` (JSON Schema keywords for each scalar it holds: ``minimum``, ``maximum``, ``pattern``,
    ``minLength``), ``array`` (keywords for the array it is: ``minItems``, ``maxItems``),
    ``digits`` (a float rounded to these in the JSON); ``name``, the key when it is not the field's name;
    ``convert``, what the JSON holds of a value its type cannot write (bytes as hex, NaN as text), and
    ``schema``, the key's schema when its type does not give it (what ``convert`` gives; a value the type
    allows the key never holds: a None it is left out for); ``in_json`` False: a field the JSON leaves out;
    ``when``: the key is in the JSON only when this holds of the record (so JSON written before the key
    existed is unchanged), and not required by the schema."""

    values: tuple[str | None, ...] | Callable[[], Sequence[str]] | None = None
    limits: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    array: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    digits: int | None = None
    name: str | None = None
    convert: Callable[[Any], Any] | None = None
    schema: Mapping[str, Any] | None = None
    in_json: bool = True
    when: Callable[[Any], bool] | None = None

    def scalar(self, kind: str) -> dict[str, Any]:
        values = self.values() if callable(self.values) else self.values
        if values is not None:
            return {"const": values[0]} if len(values) == 1 else {"enum": list(values)}
        keywords = _KEYWORDS[kind]
        return {"type": kind, **{k: v for k, v in self.limits.items() if k in keywords}}


#: The keywords that apply to each JSON type (a tuple's minimum is its numbers', not its strings').
_KEYWORDS = {"integer": {"minimum", "maximum"}, "number": {"minimum", "maximum"},
             "string": {"pattern", "minLength"}, "boolean": set()}
_PLAIN = Key()


def json_key(default: Any = dataclasses.MISSING, *,
             values: Sequence[str | None] | Callable[[], Sequence[str]] | None = None,
             digits: int | None = None, name: str | None = None, convert: Callable[[Any], Any] | None = None,
             schema: Mapping[str, Any] | None = None, array: Mapping[str, Any] | None = None, init: bool = True,
             in_json: bool = True, when: Callable[[Any], bool] | None = None,
             default_factory: Callable[[], Any] | None = None, **limits: Any) -> Any:
    """A field with what its key needs beyond its type (see :class:`Key`; ``limits`` as keywords:
    ``minimum=0``, ``pattern=...``, ``minLength=1``); ``init`` False: a key the record computes (in
    ``__post_init__``) rather than one it is given."""
    if convert is not None and schema is None:
        raise TypeError("a key that converts its value gives the schema of what it converts to")
    unknown = set(limits) - set().union(*_KEYWORDS.values())
    if unknown:
        raise TypeError(f"no such limit: {', '.join(sorted(unknown))}")
    kept = values if values is None or callable(values) else tuple(values)
    meta = {_META: Key(values=kept, limits=limits, array=array or {}, digits=digits, name=name, convert=convert,
                       schema=schema, in_json=in_json, when=when)}
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, init=init, metadata=meta)
    return dataclasses.field(default=default, init=init, metadata=meta)


_T = TypeVar("_T")


@dataclass_transform(frozen_default=True, kw_only_default=True, field_specifiers=(dataclasses.field, json_key))
def json_record(cls: type[_T] | None = None, /, *, kw_only: bool = True) -> Any:
    """A record: a frozen dataclass (keyword-only unless ``kw_only`` is False) whose :func:`json_key` fields
    describe its JSON. ``@json_record`` or ``@json_record(kw_only=False)``; checkers read it as a dataclass."""
    def make(c: type[_T]) -> type[_T]:
        return dataclasses.dataclass(frozen=True, kw_only=kw_only)(c)
    return make if cls is None else make(cls)


def to_json(record: Any) -> dict[str, Any]:
    """``record``'s keys in the order of its fields, each value as JSON: a nested record by its own
    ``to_json``, a tuple as a list, a float rounded as its :func:`json_key` says."""
    return {_name(f): _value(getattr(record, f.name), _key(f)) for f in _fields(record) if _present(f, record)}


def _present(f: dataclasses.Field[Any], record: Any) -> bool:
    when = _key(f).when
    return when is None or when(record)


def report_json(record: Any) -> dict[str, Any]:
    """A report's document: ``schema`` (its ``SCHEMA``), ``tool_version``, ``ok``, then its keys."""
    return {"schema": record.SCHEMA, "tool_version": __version__, "ok": record.ok, **to_json(record)}


def _key(f: dataclasses.Field[Any]) -> Key:
    found = f.metadata.get(_META, _PLAIN)
    assert isinstance(found, Key)
    return found


def _fields(record: Any) -> list[dataclasses.Field[Any]]:
    return [f for f in dataclasses.fields(record) if _key(f).in_json]


def _name(f: dataclasses.Field[Any]) -> str:
    return _key(f).name or f.name


def _value(value: Any, about: Key) -> Any:
    if about.convert is not None:
        return about.convert(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return cast(_Record, value).to_json()
    if isinstance(value, tuple):
        return [_value(v, about) for v in value]
    if isinstance(value, float) and about.digits is not None:
        return round(value, about.digits)
    return value


def schema_of(cls: type) -> dict[str, Any]:
    """The JSON Schema of ``cls``'s records: an object of exactly its keys, each required; a report's
    begins with ``schema`` (the const of its id), ``tool_version`` and ``ok``."""
    hints = _hints(cls)
    properties: dict[str, Any] = {}
    if hasattr(cls, "SCHEMA"):
        properties = {"schema": {"const": cls.SCHEMA}, "tool_version": {"type": "string", "minLength": 1},
                      "ok": {"type": "boolean"}}
    for f in _fields(cls):
        about = _key(f)
        properties[_name(f)] = dict(about.schema) if about.schema is not None else _schema(hints[f.name], about)
    optional = {_name(f) for f in _fields(cls) if _key(f).when is not None}
    schema = {"type": "object", "required": [k for k in properties if k not in optional], "properties": properties,
              "additionalProperties": False}
    return {**schema, **getattr(cls, "JSON_EXTRA", {})}


def schema_defs(roots: Sequence[type]) -> dict[str, dict[str, Any]]:
    """The ``$defs`` entry of every record named in the schema (``JSON_DEF``) that ``roots`` are or hold."""
    return {cast(_Named, cls).JSON_DEF: schema_of(cls) for cls in _named(roots)}


def _named(roots: Sequence[type]) -> Iterator[type]:
    seen: set[type] = set()
    todo = list(roots)
    while todo:
        cls = todo.pop(0)
        if cls in seen:
            continue
        seen.add(cls)
        if getattr(cls, "JSON_DEF", None):
            yield cls
        todo.extend(_records_in(cls))


def _records_in(cls: type) -> Iterator[type]:
    for hint in _hints(cls).values():
        yield from (t for t in _leaves(hint) if isinstance(t, type) and dataclasses.is_dataclass(t))


def _leaves(hint: Any) -> Iterator[Any]:
    args = typing.get_args(hint)
    if not args:
        yield hint
    for arg in args:
        yield from _leaves(arg)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _schema(hint: Any, about: Key) -> dict[str, Any]:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        kept = [a for a in args if a is not type(None)]
        if len(kept) != 1 or len(args) != 2:
            raise TypeError(f"no JSON shape for {hint}")
        if isinstance(about.values, tuple) and None in about.values:
            return _schema(kept[0], about)
        return {"anyOf": [_schema(kept[0], about), {"type": "null"}]}
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": _schema(args[0], about), **about.array}
        return {"type": "array", "prefixItems": [_schema(a, about) for a in args], "items": False,
                "minItems": len(args), **about.array}
    if origin is typing.Literal:    # its values' JSON type; the key's enum is its ``values``
        return about.scalar(_SCALARS[type(args[0])])
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        name = getattr(hint, "JSON_DEF", None)
        return {"$ref": f"#/$defs/{name}"} if name else schema_of(hint)
    return about.scalar(_SCALARS[hint])


_SCALARS: dict[Any, str] = {bool: "boolean", int: "integer", float: "number", str: "string"}
