"""What a chat template's strings and names hold, worked out from its syntax tree without rendering it: the
string an expression is (or starts with) when it is built from constants (``'_' * 2 ~ 'class'``,
``'ssalc'|reverse``, ``['_', '_']|join``), what each ``{% set %}`` name and namespace attribute was given, and
which names hold a message's content. The template check uses it to see a key built to reach ``__class__``
and a branch taken on what the user wrote.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from jinja2 import nodes

__all__ = ["UNKNOWN", "Text", "Values"]

#: The longest string worked out (``'_' * 10 ** 9`` is not built here).
MAX_TEXT = 4096


class Text(NamedTuple):
    """What an expression is as a string: ``prefix`` (all of it when ``complete``, else how it starts) and
    whether string operations ``built`` it from at least one constant."""

    prefix: str
    complete: bool
    built: bool

    def may_start_with_underscore(self) -> bool:
        """A name starting with ``_`` is reachable: known to be one, or built from constants and not known to
        start with anything else."""
        if self.complete:
            return self.prefix.startswith("_")
        return self.built and (self.prefix == "" or self.prefix.startswith("_"))


UNKNOWN = Text("", False, False)


def _known(value: str) -> Text:
    return Text(value, True, True) if len(value) <= MAX_TEXT else UNKNOWN


def _join(parts: list[Text]) -> Text:
    """Parts one after the other (``~``, ``+``): complete while every part is."""
    prefix, built = "", any(p.complete or p.built for p in parts)
    for part in parts:
        prefix += part.prefix
        if not part.complete:
            return Text(prefix[:MAX_TEXT], False, built)
    return Text(prefix, True, built) if len(prefix) <= MAX_TEXT else Text(prefix[:MAX_TEXT], False, built)


def _repeat(text: Text, count: int | None) -> Text:
    if count is None or count < 0:
        return Text(text.prefix if count is None else "", False, True)
    if not text.complete or len(text.prefix) * count > MAX_TEXT:
        return Text(text.prefix, False, True)
    return _known(text.prefix * count)


def _percent(template: str, args: list[Text]) -> Text:
    """``'%s%s'|format(a, b)`` with only ``%s`` fields (a width could ask for gigabytes)."""
    pieces = template.split("%s")
    if "%" in "".join(pieces) or len(pieces) != len(args) + 1 or not all(a.complete for a in args):
        return Text(pieces[0], False, True)
    return _known("".join(p + a.prefix for p, a in zip(pieces, [*args, Text("", True, False)], strict=True)))


class Values:
    """The names of one template: what each ``{% set %}`` (or ``{% set ns.k %}``) gave it, in template order,
    and which hold a message's content (set from it, or a loop over it)."""

    def __init__(self, walked: Iterable[nodes.Node]) -> None:
        """``walked``: the template's nodes in template order (the check's one walk of the tree)."""
        from jinja2 import nodes as n

        self.bound: dict[str, Text] = {}
        self.content: set[str] = set()
        for node in walked:
            if not isinstance(node, (n.Assign, n.AssignBlock, n.For)):
                continue
            source = node.iter if isinstance(node, n.For) else node.node if isinstance(node, n.Assign) else None
            name = _target(node.target)
            if name is None:
                continue
            if source is not None and self.reads_content(source):
                self.content.add(name)
            if isinstance(node, n.Assign):
                self._bind(name, self.text(node.node))
            elif isinstance(node, n.AssignBlock):
                self._bind(name, _join([self._output(o) for o in node.body]))

    def _bind(self, name: str, text: Text) -> None:
        # A name given a reachable underscore somewhere keeps it: the render may take that branch.
        old = self.bound.get(name)
        if old is None or not old.may_start_with_underscore():
            self.bound[name] = text

    def _output(self, node: nodes.Node) -> Text:
        from jinja2 import nodes as n

        if not isinstance(node, n.Output):
            return UNKNOWN
        return _join([Text(c.data, True, True) if isinstance(c, n.TemplateData) else self.text(c) for c in node.nodes])

    def reads_content(self, node: nodes.Node) -> bool:
        """Whether the expression reads a message's content (``m['content']``, ``m.content``, a name set from
        it)."""
        from jinja2 import nodes as n

        for sub in (node, *node.find_all((n.Getattr, n.Getitem, n.Name))):
            if (isinstance(sub, n.Getattr) and sub.attr == "content") or \
                    (isinstance(sub, n.Getitem) and isinstance(sub.arg, n.Const) and sub.arg.value == "content") or \
                    (isinstance(sub, n.Name) and sub.name in self.content):
                return True
        return False

    def text(self, node: nodes.Node) -> Text:
        """What the expression is as a string, as far as constants and the names' values tell."""
        rule = _TEXT_RULES.get(type(node).__name__)
        return UNKNOWN if rule is None else rule(self, node)

    def int(self, node: nodes.Node) -> int | None:
        from jinja2 import nodes as n

        if isinstance(node, n.Const) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, (n.Add, n.Sub, n.Mul)):
            a, b = self.int(node.left), self.int(node.right)
            if a is None or b is None or abs(a) > MAX_TEXT or abs(b) > MAX_TEXT:
                return None
            return a + b if isinstance(node, n.Add) else a - b if isinstance(node, n.Sub) else a * b
        return None

    def items(self, node: nodes.Node) -> list[Text] | None:
        """The strings of a list or tuple of constants (``['_', '_']``), or of one reversed."""
        from jinja2 import nodes as n

        if isinstance(node, (n.List, n.Tuple)):
            return [self.text(i) for i in node.items]
        if isinstance(node, n.Filter) and node.name in ("reverse", "list") and node.node is not None:
            inner = self.items(node.node)
            return None if inner is None else inner[::-1] if node.name == "reverse" else inner
        return None


def _target(node: nodes.Node) -> str | None:
    from jinja2 import nodes as n

    if isinstance(node, n.Name):
        return node.name
    return f"{node.name}.{node.attr}" if isinstance(node, n.NSRef) else None


def _const(values: Values, node: nodes.Const) -> Text:
    value = node.value
    if isinstance(value, str):
        return Text(value, True, False)
    return Text(str(value), True, False) if isinstance(value, int) and not isinstance(value, bool) else UNKNOWN


def _concat(values: Values, node: nodes.Concat) -> Text:
    return _join([values.text(p) for p in node.nodes])


def _add(values: Values, node: nodes.Add) -> Text:
    """``+`` joins strings only when a side is one (``loop.index0 + 1`` is a number)."""
    from jinja2 import nodes as n

    left, right = values.text(node.left), values.text(node.right)
    is_string = any(isinstance(s, n.Const) and isinstance(s.value, str) for s in (node.left, node.right))
    return _join([left, right]) if is_string or left.built or right.built else UNKNOWN


def _mul(values: Values, node: nodes.Mul) -> Text:
    from jinja2 import nodes as n

    for text_side, count_side in ((node.left, node.right), (node.right, node.left)):
        if (isinstance(text_side, n.Const) and isinstance(text_side.value, str)) or \
                (isinstance(text_side, n.Name) and text_side.name in values.bound):
            return _repeat(values.text(text_side), values.int(count_side))
    return UNKNOWN


def _name(values: Values, node: nodes.Name) -> Text:
    return values.bound.get(node.name, UNKNOWN)


def _getattr(values: Values, node: nodes.Getattr) -> Text:
    from jinja2 import nodes as n

    return values.bound.get(f"{node.node.name}.{node.attr}", UNKNOWN) if isinstance(node.node, n.Name) else UNKNOWN


def _slice(values: Values, node: nodes.Getitem) -> Text:
    from jinja2 import nodes as n

    text = values.text(node.node)
    if not isinstance(node.arg, n.Slice) or not text.complete:
        return UNKNOWN
    bounds = [None if b is None else values.int(b) for b in (node.arg.start, node.arg.stop, node.arg.step)]
    if bounds[2] == 0:
        return UNKNOWN
    return Text(text.prefix[slice(*bounds)], True, True)


def _text_map(how: Callable[[str], str], whole: bool = False) -> Callable[[Text, list[Text]], Text]:
    """A string operation: applied to all of a complete text, or (``whole`` False) to the start of any."""
    def apply(text: Text, _args: list[Text]) -> Text:
        if text.complete:
            return _known(how(text.prefix))
        return Text("" if whole else how(text.prefix), False, True)
    return apply


def _replace(text: Text, args: list[Text]) -> Text:
    if not text.complete or len(args) < 2 or not (args[0].complete and args[1].complete) or not args[0].prefix:
        return Text("", False, True)
    if text.prefix.count(args[0].prefix) * len(args[1].prefix) > MAX_TEXT:
        return Text("", False, True)
    return _known(text.prefix.replace(args[0].prefix, args[1].prefix))


def _format(text: Text, args: list[Text]) -> Text:
    return _percent(text.prefix, args) if text.complete else Text(text.prefix, False, True)


#: The string filters (and methods) whose result is worked out from constants.
_STRING_OPS: dict[str, Callable[[Text, list[Text]], Text]] = {
    "lower": _text_map(str.lower), "upper": _text_map(str.upper), "string": _text_map(str),
    "trim": _text_map(str.strip, whole=True), "strip": _text_map(str.strip, whole=True),
    "title": _text_map(str.title, whole=True), "capitalize": _text_map(str.capitalize, whole=True),
    "reverse": _text_map(lambda s: s[::-1], whole=True), "first": _text_map(lambda s: s[:1]),
    "last": _text_map(lambda s: s[-1:], whole=True), "replace": _replace, "format": _format,
}


def _joined(values: Values, items: list[Text] | None, separator: Text) -> Text:
    if items is None:
        return Text("", False, True)
    parts: list[Text] = []
    for i, item in enumerate(items):
        parts.extend((separator, item) if i else (item,))
    return _join(parts) if parts else Text("", True, True)


def _filter(values: Values, node: nodes.Filter) -> Text:
    if node.node is None:
        return UNKNOWN
    args = [values.text(a) for a in node.args]
    if node.name == "join":
        return _joined(values, values.items(node.node), args[0] if args else Text("", True, False))
    op = _STRING_OPS.get(node.name)
    return UNKNOWN if op is None else op(values.text(node.node), args)


def _call(values: Values, node: nodes.Call) -> Text:
    """A string method on a string: ``'_'.join(...)``, ``'x'.replace(...)``, ``s.lower()``."""
    from jinja2 import nodes as n

    if not isinstance(node.node, n.Getattr):
        return UNKNOWN
    method, on = node.node.attr, values.text(node.node.node)
    if method == "join" and node.args:
        return _joined(values, values.items(node.args[0]), on)
    op = _STRING_OPS.get(method) if method != "format" else None     # str.format: see the format-attribute rule
    return UNKNOWN if op is None or not (on.complete or on.built) else op(on, [values.text(a) for a in node.args])


#: How each kind of node is a string (each rule takes its own node class: Any).
_TEXT_RULES: dict[str, Callable[[Values, Any], Text]] = {
    "Const": _const, "Concat": _concat, "Add": _add, "Mul": _mul, "Name": _name, "Getattr": _getattr,
    "Getitem": _slice, "Filter": _filter, "Call": _call,
}

