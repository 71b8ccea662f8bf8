"""The one table of the rules a chat-template finding names (:class:`.finding.TemplateFinding`'s ``rule``), and
their type for type checkers: below the findings and every module that makes them."""

from __future__ import annotations

from typing import Literal

__all__ = ["RULES", "TemplateRule"]

#: A template finding's rule, for type checkers: one of RULES (tests/test_api.py holds them equal).
TemplateRule = Literal["underscore-attribute", "forbidden-name", "import", "huge-range", "unknown-filter",
                       "unknown-test", "syntax", "tag-characters", "bidi", "zero-width", "variation-selectors", "blob",
                       "url", "instruction", "format-attribute", "computed-name", "homoglyph", "conditional-injection",
                       "render-blocked", "unbounded"]
#: Every rule a template finding names (see :class:`ggaudit.format.templates.finding.TemplateFinding`).
RULES: tuple[TemplateRule, ...] = (
    "underscore-attribute", "forbidden-name", "import", "huge-range", "unknown-filter", "unknown-test", "syntax",
    "tag-characters", "bidi", "zero-width", "variation-selectors", "blob", "url", "instruction",
    "format-attribute", "computed-name", "homoglyph", "conditional-injection", "render-blocked", "unbounded")
