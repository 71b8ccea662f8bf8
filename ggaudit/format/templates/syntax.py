"""How a chat template is parsed: as transformers' chat environment parses it (``trim_blocks``,
``lstrip_blocks``, loop controls, its ``{% generation %}`` block as a plain scope). One parse serves the checks of
its syntax tree and the sandboxed render, which compiles that tree (jinja2 is imported here: this module is
loaded only for a model that has a template)."""

from __future__ import annotations

from typing import Any

from jinja2 import Environment, nodes
from jinja2.ext import Extension

__all__ = ["EXTENSIONS", "OPTIONS", "Generation", "parse"]


class Generation(Extension):
    """transformers' ``{% generation %}...{% endgeneration %}``: a plain scope."""

    tags = {"generation"}    # noqa: RUF012 -- jinja2.ext.Extension declares a set

    def parse(self, parser: Any) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


EXTENSIONS: tuple[Any, ...] = ("jinja2.ext.loopcontrols", Generation)
#: The lexer's settings of transformers' environment (the render's too).
OPTIONS: dict[str, Any] = {"trim_blocks": True, "lstrip_blocks": True}


def parse(text: str) -> nodes.Template:
    """The syntax tree of ``text``; jinja2's TemplateSyntaxError when it does not parse."""
    return Environment(extensions=list(EXTENSIONS), **OPTIONS).parse(text)
