"""Chat templates (``tokenizer.chat_template`` and ``tokenizer.chat_template.NAME``) that run code or hide
instructions.

Engines render the template with Jinja (llama-cpp-python with jinja2: CVE-2024-34359, code execution from a
GGUF's template; llama.cpp with its own engine; vLLM and transformers). Here it is checked three ways, and
nothing from the file is ever run:

- its syntax tree (:mod:`.code`, parsed as transformers parses it, :mod:`.syntax`): attribute or item access to
  a name starting with ``_`` (in a dotted ``attribute=`` path too), a key built by string operations that can
  start with ``_`` (``computed-name``), ``str.format``/``format_map`` whose fields walk attributes
  (``format-attribute``), the objects that reach Python internals (``self``, ``cycler``, ``joiner``,
  ``lipsum``, ``config``, ``request``, ``namespace`` other than called), ``import``/``include``/``extends``,
  ``range()`` of a huge constant, a template that does not parse (errors); instructions in string literals,
  homoglyphs and a branch on a message's keyword that adds prose of its own (warnings); a filter or test that
  neither jinja2 nor an engine of :mod:`.engines` provides (a note);
- its text (:mod:`.text`): invisible characters, blobs, URLs, instructions, homoglyphs (warnings; a URL in a
  comment is a note);
- a render in an instrumented sandbox (:mod:`.render`) with representative conversations (:mod:`.inputs`):
  each attempt the sandbox refuses (``render-blocked``) and a render past its budget (``unbounded``), errors.
  The tree's error on a line explains the render's attempt there: the render reports the lines the tree
  could not see.

Each finding has the template's line and column (1-based) and its absolute file offset. jinja2 is imported only
when a template is checked.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .finding import TEMPLATE, TemplateText, TemplateFinding

if TYPE_CHECKING:
    from ..layout import MetaValue, Model

__all__ = ["TEMPLATE", "TemplateFinding", "check_template", "check_templates", "is_template_key", "template_keys"]


#: Templates whose findings a process keeps (a hub's models share a handful of templates: Qwen's, Llama's):
#: each is checked once per process, by its text and the tokens its render is given.
CACHED_TEMPLATES = 128


def check_template(path: str, key: str, text: str, value_offset: int = 0, *, bos: str = "<s>",
                   eos: str = "</s>") -> tuple[TemplateFinding, ...]:
    """Every finding of one template: its syntax tree's, what its text hides, then what its sandboxed render
    attempted (:mod:`.render`) that the tree did not show already. ``value_offset``: where the key's value (its
    u64 length, then the text) is in the file; ``bos``/``eos``: the file's tokens, which the render is given.
    A template checked before in this process (the same text and tokens) is not checked again."""
    return tuple(dataclasses.replace(f, path=path, key=key, offset=f.offset + value_offset)
                 for f in checked_text(text, bos, eos))


@functools.lru_cache(maxsize=CACHED_TEMPLATES)
def checked_text(text: str, bos: str, eos: str) -> tuple[TemplateFinding, ...]:
    """:func:`check_template`'s findings for a value at offset 0 of no file and key (kept per process)."""
    from jinja2 import TemplateSyntaxError

    from .code import code_findings
    from .render import render_findings
    from .syntax import parse
    from .text import ERROR, hidden

    src = TemplateText("", "", text, 0)
    found = [src.finding(h.at, h.rule, h.severity, h.seen, h.detail) for h in hidden(text)]
    try:
        tree = parse(text)
    except TemplateSyntaxError as err:
        line = max(1, min(err.lineno or 1, len(src.starts)))
        found.insert(0, src.finding(src.starts[line - 1], "syntax", ERROR, err.message or "",
                                    f"does not parse: {err.message}; engines refuse it"))
        return tuple(found)
    code = tuple(code_findings(src, tree))
    rendered = render_findings("", "", text, 0, bos=bos, eos=eos, tree=tree)
    return (*code, *found, *_not_shown(rendered, code))


def _not_shown(rendered: Sequence[TemplateFinding], code: Sequence[TemplateFinding]) -> list[TemplateFinding]:
    """The render's findings on lines where the tree found no error: the tree's finding explains the same
    attempt with its column and its rule; the render's adds what the tree could not see."""
    explained = {f.line for f in code if f.severity == "error"}
    return [f for f in rendered if f.line not in explained]


def template_keys(model: Model) -> list[tuple[str, MetaValue]]:
    """The chat templates of a model: ``tokenizer.chat_template`` and ``tokenizer.chat_template.NAME``."""
    return [(k, v) for k, v in model.metadata.items() if is_template_key(k) and isinstance(v.value, str)]


def is_template_key(key: str) -> bool:
    return key == "tokenizer.chat_template" or key.startswith("tokenizer.chat_template.")


def check_templates(model: Model) -> tuple[TemplateFinding, ...]:
    """Every finding of every chat template of ``model`` (none without one: jinja2 is then not imported); the
    render is given the file's own bos and eos tokens."""
    path = model.files[0].path
    bos, eos = _token(model, "bos", "<s>"), _token(model, "eos", "</s>")
    return tuple(f for key, v in template_keys(model)
                 for f in check_template(path, key, v.value, v.offset, bos=bos, eos=eos))


def _token(model: Model, which: str, default: str) -> str:
    """The text of the file's ``which`` special token, where its id falls in the vocabulary's decoded head."""
    entry, tokens = model.metadata.get(f"tokenizer.ggml.{which}_token_id"), model.metadata.get("tokenizer.ggml.tokens")
    index, head = (entry.value if entry else None), getattr(tokens.value if tokens else None, "head", ())
    if isinstance(index, int) and 0 <= index < len(head) and isinstance(head[index], str):
        return str(head[index])
    return default
