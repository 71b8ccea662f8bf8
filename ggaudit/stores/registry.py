"""The stores, one class each, registered by the prefix that names them (``ollama:NAME``): a new store is
one module of this package named for its prefix (``hf-local:`` is ``hf_local.py``) defining one subclass of
:class:`Store`, ``class X(Store, prefix="x")``; it is imported when a name of its prefix is first looked up
(:func:`store_class`), and every command takes its names.

A store offers (a) the GGUF files a name stands for, for the commands that open a model, (b) what it keeps
of them to check against (digests, sizes, the layout of its folders: :meth:`Store.entries`), which ``check``
looks up by file, and (c) what ``verify`` checks of the name, in order, as data (:meth:`Store.listing`, a
:class:`~.listing.StoreListing` that verify's one walker checks), and (d) every file of its own that the name
depends on (:meth:`Store.relied_on`), which no output replaces. It reads descriptions (manifests, metadata,
folder listings), never a model's bytes.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pkgutil
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..errors import UsageError
from ..untrusted import quote
from .listing import StoreEntry, StoreListing


@dataclass(frozen=True)
class Roots:
    """Where the stores are, when not where each would be by default: ``store`` (Ollama's, LM Studio's or
    GPT4All's folder: the one the name's prefix says) and ``hf_cache`` (the Hugging Face cache)."""

    store: str | os.PathLike[str] | None = None
    hf_cache: str | os.PathLike[str] | None = None


class Store:
    """What one name of a store (the text after its prefix) stands for; subclasses register by prefix."""

    prefix: ClassVar[str]
    #: Every store class imported so far, by its prefix, the colon included (``ollama:``).
    registered: ClassVar[dict[str, type[Store]]] = {}
    #: The name that stands for every model of the store (Ollama's ``*``), if it has one: a command line
    #: verifies each model as its own target (:meth:`each_model`).
    EVERY_MODEL: ClassVar[str | None] = None
    #: The kinds of the verify reports of this store's names (its listings' ``kind``), besides its prefix's
    #: name (``ollama``): the JSON Schema's enum of verify kinds is every store's.
    OTHER_REPORT_KINDS: ClassVar[tuple[str, ...]] = ()
    #: The engine that loads this store's models and the read path it reads them through by default (Ollama:
    #: ``("Ollama", "mmap")``), so ``check`` says whether that path read right; None when no one engine does.
    ENGINE: ClassVar[tuple[str, str] | None] = None

    def __init_subclass__(cls, *, prefix: str, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        key = prefix + ":"
        if not _PREFIX.fullmatch(key) or len(prefix) < 2:      # one letter is a Windows drive
            raise TypeError(f"store prefix {prefix!r} is not a name of two or more letters, digits or -")
        if key in Store.registered:
            raise TypeError(f"store prefix {key} is taken by {Store.registered[key].__qualname__}")
        if cls.__module__ != store_module(key):
            raise TypeError(f"store prefix {key} of {cls.__module__} is not in the module named for it, "
                            f"{store_module(key)}: define it there")
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

    def entries(self) -> list[StoreEntry]:
        """What the store keeps of each file of the name, in its own order (the order ``verify`` reports
        them): the digests and sizes to check it against, or what is wrong with it before a byte is read
        (:class:`~.listing.StoreEntry`). ``check`` looks them up by file
        (:func:`~ggaudit.stores.expected.store_expectations`); they are the files of :meth:`listing`, so the
        two cannot disagree. A store that keeps nothing of its files lists none."""
        return []

    def listing(self) -> StoreListing:
        """What ``verify`` checks of the name, in the order it reports it: the entries, the warnings said
        among and after them, the report's subject and kind, what an empty one held. ManifestError when
        what describes the name is missing or malformed; NothingChecked when the store can tell already
        that nothing would be checked (an Ollama manifest listing no layer)."""
        raise NotImplementedError

    @property
    def every_model(self) -> bool:
        """Whether the name stands for every model of the store (:data:`EVERY_MODEL`)."""
        return self.EVERY_MODEL is not None and self.name == self.EVERY_MODEL

    def each_model(self) -> list[Part]:
        """The targets a command line verifies, one report each, for a name standing for every model: one
        per model, then the store's own (what no model holds); just the name itself for any other."""
        return [Part(str(self), self)]

    def redownload(self, damaged: Sequence[str]) -> str | None:
        """The next step, in words, for the files at ``damaged`` (of this name) that differ from what was
        published: how this store downloads them again, replacing its copy; None where the store has no
        way of its own (``check`` then says the general one)."""
        return None

    def relied_on(self) -> list[str]:
        """Every file of the store that the name depends on, listed without reading a model: what describes
        it (a manifest, a ref, download metadata, a model list) and the files that says are the name's (blobs,
        links, shards). No output of a run on the name replaces any of them: ``-o FILE`` naming one is refused
        before a byte is read, as a run's own inputs are (``ggaudit.io.output_files.check_output``). A
        description that cannot be read still names itself (the run says what is wrong with it, and its
        report may not replace it). By default, the files of :meth:`entries`; a store keeping descriptions of
        its own names them too."""
        return list(dict.fromkeys(path for entry in self.entries() for path in (entry.path, entry.read)))

    @classmethod
    def report_kinds(cls) -> tuple[str, ...]:
        """The kinds its verify reports have: its prefix's name (``hf-local``), then :data:`OTHER_REPORT_KINDS`."""
        return (cls.prefix.removesuffix(":"), *cls.OTHER_REPORT_KINDS)

    @classmethod
    def holds(cls, name: str, roots: Roots) -> bool:
        """Whether ``name`` (typed without the prefix) names a model this store holds: a bare name that is
        no file is then said as the store's (``did you mean ollama:NAME?``). Looks at names, reads nothing."""
        return False


@dataclass(frozen=True)
class Part:
    """One target of a name that stands for every model of its store (:meth:`Store.each_model`): ``label``,
    what the run calls it; ``store``, what is verified; ``reads``: whether its check reads any file's bytes
    (the store's own search for orphans reads none, so no digest cache is opened for it)."""

    label: str
    store: Store
    reads: bool = True


_PREFIX = re.compile(r"[A-Za-z][A-Za-z0-9-]*:")
_LEADING_PREFIX = re.compile(r"[A-Za-z][A-Za-z0-9-]+:")


def store_module(prefix: str) -> str:
    """The module a store of ``prefix`` is defined in, by its name: ``hf-local:`` is ``ggaudit.stores.hf_local``."""
    return f"{__package__}.{prefix.removesuffix(':').replace('-', '_')}"


def known_prefixes() -> list[str]:
    """Every store's prefix: each module of the package is imported, to find the classes (for the words of
    an error, a name that is no file: never for a path that is one)."""
    for module in pkgutil.iter_modules(importlib.import_module(__package__).__path__):
        importlib.import_module(f"{__package__}.{module.name}")
    return sorted(Store.registered)


def store_class(prefix: str) -> type[Store] | None:
    """The store class of ``prefix`` (``ollama:``), the module named for it imported on first use; None if
    there is no such module, or it registers no store of that prefix (``sums:``: a module, no store)."""
    if prefix not in Store.registered:
        module = store_module(prefix)
        if not _LEADING_PREFIX.fullmatch(prefix) or importlib.util.find_spec(module) is None:
            return None
        importlib.import_module(module)
    return Store.registered.get(prefix)


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


def every_model_store(text: str, roots: Roots) -> Store | None:
    """The store ``text`` names when it names every model of it (``ollama:*``), else None; never an error
    (what the name is otherwise is its check's to say)."""
    leading = _LEADING_PREFIX.match(text)
    if leading is None:
        return None
    store = store_class(leading.group())
    if store is None or store.EVERY_MODEL is None or text[leading.end():] != store.EVERY_MODEL:
        return None
    return store(store.EVERY_MODEL, roots)


def refuse_unknown_name(text: str, roots: Roots) -> None:
    """For ``text`` that names no file: a UsageError saying the store name it means, when a store holds a
    model of that name (``clef-flash``, ``clef-flash:latest`` in Ollama's store, ``ORG/NAME`` in the Hugging
    Face cache); nothing when none does (opening the path then says it is missing)."""
    for prefix in known_prefixes():
        store = store_class(prefix)
        if store is not None and store.holds(text, roots):
            # A name a store holds passed its parser (letters, digits, ._-/:): shown as typed.
            raise UsageError(text, f"no such file; did you mean {prefix}{text}?")


def files_below(folder: str | os.PathLike[str]) -> list[str]:
    """Every file below ``folder``, as paths, in a stable order: links are listed, never followed into a
    folder; nothing when ``folder`` is absent or no folder."""
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames.sort()
        here = os.fspath(dirpath)
        found.extend(os.path.join(here, name) for name in sorted(
            filenames + [n for n in dirnames if os.path.islink(os.path.join(here, n))]))
    return found


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
