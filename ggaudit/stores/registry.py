"""The stores, one class each, registered by the prefix that names them (``ollama:NAME``): a new store is
one subclass of :class:`Store`, ``class X(Store, prefix="x")``, and one line in :data:`STORE_MODULES` (its
module, imported when a name of it is first looked up), and every command takes its names.

A store offers (a) the GGUF files a name stands for, for the commands that open a model, and (b) what it
keeps of them to check against (digests, sizes, the layout of its folders: :meth:`Store.entries`), for
``verify``, whose walkers check that data, and ``check``, which looks it up by file. It reads descriptions
(manifests, metadata, folder listings), never a model's bytes.
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import UsageError
from ..untrusted import quote

if TYPE_CHECKING:
    from .expected import StoreEntry

#: Every store's prefix and the module that defines its class, imported when a name with that prefix is
#: first looked up, so a plain path loads no store. A store class registers only a prefix listed here, by
#: the module listed (tests/test_store_registry.py checks the table against the classes).
STORE_MODULES: dict[str, str] = {
    "gpt4all:": "ggaudit.stores.gpt4all",
    "hf-local:": "ggaudit.stores.hf_local",
    "hf:": "ggaudit.stores.hf_cache",
    "lmstudio:": "ggaudit.stores.lmstudio",
    "ollama:": "ggaudit.stores.ollama",
}


@dataclass(frozen=True)
class Roots:
    """Where the stores are, when not where each would be by default: ``store`` (Ollama's, LM Studio's or
    GPT4All's folder: the one the name's prefix says) and ``hf_cache`` (the Hugging Face cache)."""

    store: str | os.PathLike[str] | None = None
    hf_cache: str | os.PathLike[str] | None = None


class Store:
    """What one name of a store (the text after its prefix) stands for; subclasses register by prefix."""

    prefix: ClassVar[str]
    #: Every store class by its prefix, the colon included (``ollama:``).
    registered: ClassVar[dict[str, type[Store]]] = {}

    def __init_subclass__(cls, *, prefix: str, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        key = prefix + ":"
        if not _PREFIX.fullmatch(key) or len(prefix) < 2:      # one letter is a Windows drive
            raise TypeError(f"store prefix {prefix!r} is not a name of two or more letters, digits or -")
        if key in Store.registered:
            raise TypeError(f"store prefix {key} is taken by {Store.registered[key].__qualname__}")
        if STORE_MODULES.get(key) != cls.__module__:
            raise TypeError(f"store prefix {key} of {cls.__module__} is not in STORE_MODULES: list it there")
        cls.prefix = key
        Store.registered[key] = cls

    def __init__(self, name: str, roots: Roots) -> None:
        self.name = name        # the text after the prefix, as given (untrusted)
        self.roots = roots

    def __str__(self) -> str:
        return self.prefix + self.name

    def model_files(self) -> list[str]:
        """The GGUF files of the one model the name picks out: the model's (a split set's first shard,
        which opens the set), then those that go with it (a projector). UsageError when the name stands
        for no model or for several; ManifestError when what describes them is missing or malformed."""
        raise NotImplementedError

    def description_files(self) -> list[str]:
        """The files besides the GGUF files that are read to find them (an Ollama manifest): an output
        must not replace them either."""
        return []

    def entries(self) -> list[StoreEntry]:
        """What the store keeps of each file of the name, in its own order (the order ``verify`` reports
        them): the digests and sizes to check it against, or what is wrong with it before a byte is read
        (:class:`~ggaudit.stores.expected.StoreEntry`). ``check`` looks them up by file
        (:func:`~ggaudit.stores.expected.store_expectations`): one listing, so the two cannot disagree. A
        store that keeps nothing of its files lists none."""
        return []

    def input_files(self) -> list[str]:
        """Every file a ``verify`` of the name reads, listed without reading any model: the expectations'
        files and the files they name."""
        raise NotImplementedError

    @classmethod
    def holds(cls, name: str, roots: Roots) -> bool:
        """Whether ``name`` (typed without the prefix) names a model this store holds: a bare name that is
        no file is then said as the store's (``did you mean ollama:NAME?``). Looks at names, reads nothing."""
        return False


_PREFIX = re.compile(r"[A-Za-z][A-Za-z0-9-]*:")
_LEADING_PREFIX = re.compile(r"[A-Za-z][A-Za-z0-9-]+:")


def known_prefixes() -> list[str]:
    return sorted(STORE_MODULES)


def store_class(prefix: str) -> type[Store] | None:
    """The store class of ``prefix`` (``ollama:``), its module imported on first use; None if none has it."""
    module = STORE_MODULES.get(prefix)
    if module is None:
        return None
    importlib.import_module(module)
    return Store.registered[prefix]


def find_store(text: str, roots: Roots, field: str = "model") -> Store | None:
    """The store ``text`` names, or None when it is a path. Text that begins as a prefix does
    (``foo:bar``) but names no registered store and no existing file is a UsageError listing the
    known prefixes; a drive letter (``C:\\model.gguf``) is never a prefix."""
    leading = _LEADING_PREFIX.match(text)
    if leading is None:
        return None
    store = store_class(leading.group())
    if store is not None:
        return store(text[leading.end():], roots)
    if os.path.lexists(text):      # a file whose name holds a colon
        return None
    refuse_unknown_name(text, roots)
    raise UsageError(None, f"{quote(text)} is no file, and {quote(leading.group())} is no store prefix; the "
                           f"prefixes are {', '.join(known_prefixes())}", field=field)


def refuse_unknown_name(text: str, roots: Roots) -> None:
    """For ``text`` that names no file: a UsageError saying the store name it means, when a store holds a
    model of that name (``clef-flash``, ``clef-flash:latest`` in Ollama's store, ``ORG/NAME`` in the Hugging
    Face cache); nothing when none does (opening the path then says it is missing)."""
    for prefix in known_prefixes():
        store = store_class(prefix)
        if store is not None and store.holds(text, roots):
            # A name a store holds passed its parser (letters, digits, ._-/:): shown as typed.
            raise UsageError(text, f"no such file; did you mean {prefix}{text}?")


def one_model(where: str, files: Sequence[str], hint: str) -> str:
    """The one GGUF model among ``files`` (names of whole models or first shards), or a UsageError saying
    how many there are and ``hint``, how to name one."""
    if len(files) == 1:
        return files[0]
    names = ", ".join(quote(name) for name in files[:4]) + (", ..." if len(files) > 4 else "")
    raise UsageError(None, f"{where} holds {len(files)} GGUF models{': ' + names if files else ''}; {hint}",
                     field="model")


_SHARD = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$")


def opens_a_model(name: str) -> bool:
    """A GGUF file that is a whole model, or the first shard of a split set (which opens the set)."""
    shard = _SHARD.search(name)
    return name.lower().endswith(".gguf") and (shard is None or shard.group(1) == "00001")


def is_projector(name: str) -> bool:
    """llama.cpp's name for a vision model's projector file (``mmproj-*.gguf``), kept beside the model."""
    return os.path.basename(name).lower().startswith("mmproj")
