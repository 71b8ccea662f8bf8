"""A record's JSON and its JSON Schema from one description: the frozen dataclass itself.

Each field is a key, in the order the fields are declared; its annotation gives the key's type in the
schema (``int``, ``str | None``, ``tuple[Checked, ...]``, another such record), and :func:`key` adds what
a type cannot say (an enum, a minimum, a pattern, digits to round to). :func:`to_json` writes a record by
that description and :func:`schema_of` gives its schema, so a field is written once: a key cannot be in
the JSON and missing from the schema, or typed one way in each (tests/test_json_schema.py compares the
shipped schema with :func:`schema_defs`; ``python scripts/derive_schema.py`` writes it).

A record named in the schema's ``$defs`` says so with ``JSON_DEF``; one without is written inline where
it is used. A report (a record whose JSON is a document of its own) also has ``SCHEMA``, its id, and its
JSON begins with ``schema``, ``tool_version`` and ``ok``: :func:`report_json`.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar, Protocol, Union, cast

from ._version import __version__

__all__ = ["key", "report_json", "schema_defs", "schema_of", "to_json"]

_META = "json"


class _Record(Protocol):
    def to_json(self) -> dict[str, Any]: ...


class _Named(Protocol):
    JSON_DEF: ClassVar[str]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Key:
    """What a field's annotation cannot say about its key: ``enum`` (its values), ``minimum`` (of a number,
    of each number of a tuple), ``pattern`` (of a string), ``digits`` (a float rounded to these in the JSON,
    any number of them in the schema)."""

    enum: tuple[str, ...] | None = None
    minimum: int | None = None
    pattern: str | None = None
    digits: int | None = None

    def constrain(self, schema: dict[str, Any]) -> dict[str, Any]:
        if self.enum is not None:
            return {"enum": list(self.enum)}
        if self.pattern is not None:
            schema["pattern"] = self.pattern
        if self.minimum is not None and schema.get("type") in ("integer", "number"):
            schema["minimum"] = self.minimum
        return schema


_PLAIN = Key()


def key(default: Any = dataclasses.MISSING, *, enum: Sequence[str] | None = None, minimum: int | None = None,
        pattern: str | None = None, digits: int | None = None, init: bool = True) -> Any:
    """A field with what its key's schema needs beyond its type (see :class:`Key`); ``init`` False: a key
    the record computes (in ``__post_init__``) rather than one it is given."""
    meta = {_META: Key(enum=None if enum is None else tuple(enum), minimum=minimum, pattern=pattern,
                       digits=digits)}
    return dataclasses.field(default=default, init=init, metadata=meta)


def to_json(record: Any) -> dict[str, Any]:
    """``record``'s keys in the order of its fields, each value as JSON: a nested record by its own
    ``to_json``, a tuple as a list, a float rounded as its :func:`key` says."""
    return {f.name: _value(getattr(record, f.name), _key(f)) for f in dataclasses.fields(record)}


def report_json(record: Any) -> dict[str, Any]:
    """A report's document: ``schema`` (its ``SCHEMA``), ``tool_version``, ``ok``, then its keys."""
    return {"schema": record.SCHEMA, "tool_version": __version__, "ok": record.ok, **to_json(record)}


def _key(f: dataclasses.Field[Any]) -> Key:
    found = f.metadata.get(_META, _PLAIN)
    assert isinstance(found, Key)
    return found


def _value(value: Any, about: Key) -> Any:
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
    for f in dataclasses.fields(cls):
        properties[f.name] = _schema(hints[f.name], _key(f))
    schema = {"type": "object", "required": list(properties), "properties": properties,
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
        if len(kept) == 1 and len(args) == 2:
            return {"anyOf": [_schema(kept[0], about), {"type": "null"}]}
        raise TypeError(f"no JSON shape for {hint}")
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": _schema(args[0], about)}
        return {"type": "array", "prefixItems": [_schema(a, about) for a in args], "items": False,
                "minItems": len(args)}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        name = getattr(hint, "JSON_DEF", None)
        return {"$ref": f"#/$defs/{name}"} if name else schema_of(hint)
    return about.constrain({"type": _SCALARS[hint]})


_SCALARS: dict[Any, str] = {bool: "boolean", int: "integer", float: "number", str: "string"}
