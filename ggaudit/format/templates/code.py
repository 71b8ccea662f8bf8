"""The rules on a chat template's syntax tree (parsed with jinja2, never rendered): names and keys that lead
to Python internals, templates loaded, huge constant ranges, filters and tests no engine provides, and a
branch on a message's content that adds prose of its own. :func:`code_findings` yields them."""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from .engines import ENGINES, JINJA2, providers
from .finding import TemplateFinding, TemplateRule, TemplateText
from .text import ERROR, NOTE, WARNING, homoglyphs, instructions
from .values import Values

if TYPE_CHECKING:
    from jinja2 import nodes

__all__ = ["FORBIDDEN_NAMES", "MAX_RANGE", "code_findings"]

#: Names whose objects lead from a template to Python internals (jinja2's globals, Flask's).
FORBIDDEN_NAMES = frozenset(("self", "cycler", "joiner", "namespace", "lipsum", "config", "request"))
#: Filters that take attribute names: where the name is among the positional arguments (None: only as
#: ``attribute=``), as jinja2 3.1 declares them. All but ``attr`` split it on ``.`` (``a.b.__class__``).
_ATTRIBUTE_ARGUMENT: dict[str, int | None] = {"attr": 0, "map": None, "selectattr": 0, "rejectattr": 0, "sort": 2,
                                              "groupby": 0, "unique": 1, "sum": 0, "min": 1, "max": 1}
#: The tags that load another template, and the word each is written with.
_LOADS = {"Import": "import", "FromImport": "import", "Include": "include", "Extends": "extends"}
#: String methods that test what a text holds, as a branch's condition.
_CONTENT_TESTS = frozenset(("startswith", "endswith", "find", "rfind", "index", "count", "__contains__"))
#: Special tokens and whitespace, which a branch on the content emits in real templates (``<think>``).
_SPECIAL_TOKENS = re.compile(r"<\|?[^<>\s]*\|?>|\[/?[A-Z_]+\]")
_WORD = re.compile(r"[^\W\d_]{2,}")
#: Words that make a branch's own text prose rather than markup.
MIN_PROSE_WORDS = 3
#: Most elements a ``range()`` of constants may produce (real templates range over the messages).
MAX_RANGE = 100_000

# ----- code: the syntax tree ---------------------------------------------------------------------

def _const_text(node: nodes.Node) -> str | None:
    """A string the expression always is (a constant, or constants joined with ``~`` or ``+``), else None."""
    from jinja2 import nodes as n

    if isinstance(node, n.Const):
        return node.value if isinstance(node.value, str) else None
    parts: list[nodes.Node] = list(node.nodes) if isinstance(node, n.Concat) else \
        [node.left, node.right] if isinstance(node, n.Add) else []
    texts = [_const_text(p) for p in parts]
    return "".join(t for t in texts if t is not None) if parts and None not in texts else None


def _const_int(node: nodes.Node) -> int | None:
    from jinja2 import nodes as n

    if isinstance(node, n.Const) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, n.Neg):
        inner = _const_int(node.node)
        return None if inner is None else -inner
    if isinstance(node, (n.Mul, n.Pow)):
        a, b = _const_int(node.left), _const_int(node.right)
        if a is None or b is None or (isinstance(node, n.Pow) and not 0 <= b <= 64):
            return None
        return a * b if isinstance(node, n.Mul) else a ** b
    return None


def _distinct_piece(node: nodes.Node) -> str | None:
    """The first string constant of an expression that is a word of two or more characters (``class``): what
    places that expression on its line when a name (``u``) would match another."""
    from jinja2 import nodes as n

    for const in node.find_all(n.Const):
        if isinstance(const.value, str) and len(const.value) > 1 and const.value.isidentifier():
            return const.value
    return None


def _leaf(node: nodes.Node) -> str:
    """The text an expression's source starts with, as far as its tree tells (a name or a constant)."""
    from jinja2 import nodes as n

    if isinstance(node, n.Name):
        return node.name
    if isinstance(node, n.Const):
        return str(node.value)
    if isinstance(node, n.NSRef):
        return node.name
    first = node.nodes[0] if isinstance(node, n.Concat) and node.nodes else \
        node.items[0] if isinstance(node, (n.List, n.Tuple)) and node.items else \
        node.left if isinstance(node, n.BinExpr) else getattr(node, "node", None)
    return _leaf(first) if isinstance(first, n.Node) else ""


def _walk(tree: nodes.Template) -> Iterator[tuple[nodes.Node, frozenset[str]]]:
    """Every node under ``tree``, in pre-order (a call before the name it calls), with the parameters of the
    macros around it: there a name is the caller's argument (functionary's ``namespace='functions'``), not
    jinja2's global of that name."""
    from jinja2 import nodes as n

    none: frozenset[str] = frozenset()
    stack = [(c, none) for c in tree.iter_child_nodes()][::-1]
    while stack:
        node, params = stack.pop()
        yield node, params
        if isinstance(node, (n.Macro, n.CallBlock)):
            inner = params | {a.name for a in node.args}
            # A call block's call is made where it stands; its body (like a macro's) sees the parameters.
            outer = {id(c) for c in (node.call, *node.args, *node.defaults)} if isinstance(node, n.CallBlock) else set()
            kids = [(c, params if id(c) in outer else inner) for c in node.iter_child_nodes()]
        else:
            kids = [(c, params) for c in node.iter_child_nodes()]
        stack.extend(reversed(kids))


class _Code:
    """The rules on the syntax tree of one template."""

    def __init__(self, src: TemplateText, tree: nodes.Template) -> None:
        self.walked = list(_walk(tree))
        self.src, self.values = src, Values(node for node, _ in self.walked)
        self.called_namespace: set[int] = set()     # pre-order: a call is met before the name it calls
        self.compared: set[int] = set()             # strings a condition compares with: not text for the model

    def error(self, node: nodes.Node, needle: str, rule: TemplateRule, detail: str) -> TemplateFinding:
        return self.src.finding(self.src.find(node.lineno, needle), rule, ERROR, needle, detail)

    def underscore(self, node: nodes.Node, name: str, how: str) -> TemplateFinding:
        return self.error(node, name, "underscore-attribute",
                          f"{how} {name!r}, a name starting with _: the way out of the template into Python "
                          "(CVE-2024-34359)")

    def findings(self) -> Iterator[TemplateFinding]:
        from jinja2 import nodes as n

        rules: dict[type[nodes.Node], Callable[[Any], Iterator[TemplateFinding]]] = {
            n.Getattr: self._getattr, n.Getitem: self._getitem, n.Call: self._call, n.Filter: self._filter,
            n.Test: self._filter, n.If: self._conditional, n.Compare: self._compare, n.Const: self._string,
            n.TemplateData: self._data, n.Import: self._import, n.FromImport: self._import,
            n.Include: self._import, n.Extends: self._import}
        for node, params in self.walked:
            if isinstance(node, n.Name):
                yield from self._name(node, params)
            else:
                rule = rules.get(type(node))
                if rule is not None:
                    yield from rule(node)

    def _getattr(self, node: nodes.Getattr) -> Iterator[TemplateFinding]:
        if node.attr.startswith("_"):
            yield self.underscore(node, node.attr, "attribute")

    def _getitem(self, node: nodes.Getitem) -> Iterator[TemplateFinding]:
        from jinja2 import nodes as n

        key = _const_text(node.arg)
        if key is not None:
            if key.startswith("_"):
                yield self.underscore(node, key if isinstance(node.arg, n.Const) else key[:1], "item")
        elif not isinstance(node.arg, n.Slice):
            yield from self._computed(node, node.arg, "[", "item")

    def _computed(self, node: nodes.Node, key: nodes.Node, opener: str, how: str) -> Iterator[TemplateFinding]:
        """A key that string operations build at render time and that can start with ``_``."""
        text = self.values.text(key)
        if not text.may_start_with_underscore():
            return
        leaf = _leaf(key)
        seen = text.prefix if text.complete else leaf
        value = f"which is {text.prefix!r}" if text.complete else "whose value is not known before the render"
        index = self._key_start(node.lineno, key, opener, leaf)
        yield self.src.finding(index, "computed-name", ERROR, seen,
                               f"{how} name built from strings at render time, {value}: a name starting with _ "
                               "hidden from a reader (CVE-2024-34359)")

    def _key_start(self, lineno: int, key: nodes.Node, opener: str, leaf: str) -> int:
        """Where a built key starts: its ``leaf`` after its ``opener``. Several keys on one line (``x[u ~ 'mro' ~
        u][u ~ 'class' ~ u]``, met outermost first) are told apart by a word of their own: the opener is the
        last one before it."""
        word = _distinct_piece(key)
        if word is None:
            return self.src.find_after(lineno, opener, leaf)
        text, at = self.src.text, self.src.find(lineno, word)
        opened = text.rfind(opener, 0, at)
        while opened >= 0:      # the opener the key's own leaf follows (not a list's ``[`` inside the key)
            gap = text[opened + len(opener):at]
            start = at - len(gap.lstrip())
            if text.startswith(leaf, start):
                return start
            opened = text.rfind(opener, 0, opened)
        return self.src.find_after(lineno, opener, leaf)

    def _name(self, node: nodes.Name, params: frozenset[str]) -> Iterator[TemplateFinding]:
        if node.name in FORBIDDEN_NAMES and id(node) not in self.called_namespace and node.ctx == "load" and \
                node.name not in params:
            yield self.error(node, node.name, "forbidden-name",
                             f"{node.name!r}: an object whose attributes reach Python internals")
        elif node.name.startswith("__"):
            yield self.underscore(node, node.name, "name")

    def _import(self, node: nodes.Node) -> Iterator[TemplateFinding]:
        word = _LOADS[type(node).__name__]
        yield self.error(node, word, "import", f"{{% {word} %}}: loads another template, which engines refuse")

    def _call(self, node: nodes.Call) -> Iterator[TemplateFinding]:
        from jinja2 import nodes as n

        if isinstance(node.node, n.Name) and node.node.name == "namespace":
            self.called_namespace.add(id(node.node))
        if isinstance(node.node, n.Getattr) and node.node.attr in ("format", "format_map"):
            yield from self._format(node, node.node)
        yield from self._range(node)

    def _format(self, node: nodes.Call, method: nodes.Getattr) -> Iterator[TemplateFinding]:
        """``str.format`` on a constant whose fields walk attributes or items (``'{0.__class__}'.format(x)``)."""
        text = self.values.text(method.node)
        if not text.complete:
            return
        for field in _walking_fields(text.prefix):
            index = self.src.find(node.lineno, "{" + field) + 1
            yield self.src.finding(index, "format-attribute", ERROR, field,
                                   f"{method.attr}() of a field that walks attributes or items ({field!r}): "
                                   "str.format reaches Python internals without a '.' in the template's code")

    def _range(self, node: nodes.Call) -> Iterator[TemplateFinding]:
        """``range()`` of constants that would make more than MAX_RANGE elements (a render that never ends)."""
        from jinja2 import nodes as n

        if not (isinstance(node.node, n.Name) and node.node.name == "range") or not node.args:
            return
        bounds = [_const_int(a) for a in node.args]
        if None in bounds or len(bounds) > 3 or (len(bounds) == 3 and bounds[2] == 0):
            return
        size = len(range(*[b for b in bounds if b is not None]))
        if size > MAX_RANGE:
            yield self.error(node, "range", "huge-range", f"range() of {size} elements (more than {MAX_RANGE}): "
                             "a render that exhausts time or memory")

    def _filter(self, node: nodes.Filter | nodes.Test) -> Iterator[TemplateFinding]:
        from jinja2 import nodes as n

        what = "filter" if isinstance(node, n.Filter) else "test"
        if not self._provided(what, node.name):
            yield self._unknown(node, what, node.name, "")
            return
        if isinstance(node, n.Filter):
            yield from self._attribute_arguments(node)
            if node.name == "map" and node.args and (inner := _const_text(node.args[0])) is not None and \
                    not any(kw.key == "attribute" for kw in node.kwargs) and not self._provided("filter", inner):
                yield self._unknown(node, "filter", inner, "map() of ")

    @staticmethod
    def _provided(what: str, name: str) -> bool:
        return name in (JINJA2.filters if what == "filter" else JINJA2.tests) or bool(providers(what, name))

    def _unknown(self, node: nodes.Node, what: str, name: str, how: str) -> TemplateFinding:
        rule: TemplateRule = "unknown-filter" if what == "filter" else "unknown-test"
        return self.src.finding(self.src.find(node.lineno, name), rule, NOTE, name,
                                f"{how}{what} {name!r}, which neither jinja2 nor a chat engine ggaudit knows "
                                f"provides ({', '.join(e.name for e in ENGINES)}): an engine without it refuses "
                                "the template where it is evaluated")

    def _attribute_arguments(self, node: nodes.Filter) -> Iterator[TemplateFinding]:
        """The attribute names a filter is given: literal ones walked segment by segment, computed ones as
        keys."""
        if node.name not in _ATTRIBUTE_ARGUMENT:
            return
        at = _ATTRIBUTE_ARGUMENT[node.name]
        args = [kw.value for kw in node.kwargs if kw.key == "attribute" and node.name != "attr"]
        args += [node.args[at]] if at is not None and len(node.args) > at else []
        for arg in args:
            text = _const_text(arg)
            if text is not None:
                yield from self._dotted(node, text)
            elif self.values.text(arg).may_start_with_underscore():
                yield from self._computed(node, arg, node.name, f"{node.name}() of attribute")
            elif node.name == "attr":
                yield self.error(node, "attr", "underscore-attribute", "attr() of a name computed at render time: "
                                 "any attribute, those starting with _ included")

    def _dotted(self, node: nodes.Filter, path: str) -> Iterator[TemplateFinding]:
        """``map(attribute='a.b.__class__')``: jinja2 walks each ``.`` segment (``attr`` takes the name whole)."""
        segments = [path] if node.name == "attr" else path.split(".")
        at = self.src.find(node.lineno, path)
        offset = 0
        for segment in segments:
            if segment.startswith("_"):
                yield self.src.finding(at + offset, "underscore-attribute", ERROR, segment,
                                       f"{node.name}() of attribute {segment!r}, a name starting with _: the way out "
                                       "of the template into Python (CVE-2024-34359)")
            offset += len(segment) + 1

    def _compare(self, node: nodes.Compare) -> Iterator[TemplateFinding]:
        from jinja2 import nodes as n

        self.compared.update(id(o) for o in (node.expr, *(op.expr for op in node.ops)) if isinstance(o, n.Const))
        return iter(())

    def _string(self, node: nodes.Const) -> Iterator[TemplateFinding]:
        """Instructions and homoglyphs in a string literal (not one a condition compares with)."""
        if not isinstance(node.value, str) or id(node) in self.compared:
            return
        yield from self.src.hits(node.lineno, instructions(node.value, "a string of the template"))
        yield from self.src.hits(node.lineno, homoglyphs(node.value, "a string of the template"))

    def _data(self, node: nodes.TemplateData) -> Iterator[TemplateFinding]:
        """Plain text (outside every tag: the tree's TemplateData, so the template is not lexed a second time)."""
        where = "plain text outside any tag, rendered into every prompt,"
        yield from self.src.hits(node.lineno, instructions(node.data, where))
        yield from self.src.hits(node.lineno, homoglyphs(node.data, where))

    def _conditional(self, node: nodes.If) -> Iterator[TemplateFinding]:
        """A branch taken on a keyword in a message's content that emits prose of its own: a prompt injected
        when the user writes that word."""
        keyword = self._content_keyword(node.test)
        prose = _own_prose(node) if keyword is not None else None
        if keyword is None or prose is None:
            return
        index = self.src.find(keyword.lineno, keyword.value)
        yield self.src.finding(index, "conditional-injection", WARNING, keyword.value,
                               f"a branch taken when a message's content holds {keyword.value!r} adds text of its "
                               f"own to the prompt: {prose[:120]!r}")

    def _content_keyword(self, test: nodes.Node) -> nodes.Const | None:
        """The string a condition looks for in a message's content (``'x' in m['content']``,
        ``m.content.startswith('x')``), if it looks for one."""
        from jinja2 import nodes as n

        for sub in (test, *test.find_all((n.Compare, n.Call))):
            if isinstance(sub, n.Compare):
                operands = [sub.expr, *(op.expr for op in sub.ops)]
            elif isinstance(sub, n.Call) and isinstance(sub.node, n.Getattr) and sub.node.attr in _CONTENT_TESTS:
                operands = [sub.node.node, *sub.args]
            else:
                continue
            strings = [o for o in operands if isinstance(o, n.Const) and isinstance(o.value, str) and o.value]
            if strings and any(self.values.reads_content(o) for o in operands):
                return strings[0]
        return None


def _walking_fields(spec: str) -> Iterator[str]:
    """The replacement fields of a str.format string that walk attributes or items (``0.__class__``,
    ``x[_y]``), nested format specs included. ``string.Formatter().parse`` only splits the string."""
    try:
        parsed = list(string.Formatter().parse(spec))
    except ValueError:
        return      # not a format string: format() refuses it at render time
    for _, field, format_spec, _ in parsed:
        if field and ("." in field or "[" in field):
            yield field
        if format_spec and "{" in format_spec:
            yield from _walking_fields(format_spec)


def _own_prose(node: nodes.If) -> str | None:
    """The prose a branch (any arm) emits itself, constant text of several words, if it emits any."""
    from jinja2 import nodes as n

    arms: list[nodes.Node] = [*node.body, *node.elif_, *node.else_]
    for arm in arms:
        for output in (arm, *arm.find_all(n.Output)):
            if not isinstance(output, n.Output):
                continue
            text = "".join(c.data if isinstance(c, n.TemplateData) else c.value for c in output.nodes
                           if isinstance(c, n.TemplateData) or (isinstance(c, n.Const) and isinstance(c.value, str)))
            if len(_WORD.findall(_SPECIAL_TOKENS.sub(" ", text))) >= MIN_PROSE_WORDS:
                return " ".join(text.split())
    return None


def code_findings(src: TemplateText, tree: nodes.Template) -> Iterator[TemplateFinding]:
    """The findings of the rules on one template's syntax tree, placed by ``src``."""
    return _Code(src, tree).findings()
