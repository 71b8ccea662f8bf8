"""The Ollama store: model names, where the store is, manifests and their blobs.

Every digest read from a manifest goes through ``parse_digest`` before it becomes part of a path.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import ManifestError, NothingChecked, Param, UsageError, Words
from ..untrusted import OUTSIDE, confine, quote, real, shorten
from .expected import BLOB_NAME, STORE
from .listing import ORPHAN, Expected, Problem, Said, StoreEntry, StoreListing
from .registry import Part, Roots, Store
from .small_files import HEX64, is_count, load_json

log = logging.getLogger(__name__)


def parse_digest(value: object, *, path: str | os.PathLike[str], field: str) -> str:
    """The 64 lowercase hex digits of a ``sha256:<64 hex>`` digest, or ManifestError.

    This is the only way a digest from a manifest reaches a path, so nothing like ``../`` ever can.
    """
    if not isinstance(value, str) or not value.startswith("sha256:") \
            or not HEX64.fullmatch(value[len("sha256:"):]):
        shown = quote(value) if isinstance(value, str) else type(value).__name__
        raise ManifestError(path, f"digest {shown} is not of the form sha256:<64 hex digits>",
                            field=field)
    return value[len("sha256:"):].lower()


DEFAULT_HOST = "registry.ollama.ai"
DEFAULT_NAMESPACE = "library"
DEFAULT_TAG = "latest"
MEDIA_MODEL = "application/vnd.ollama.image.model"
MEDIA_PROJECTOR = "application/vnd.ollama.image.projector"

_NAME_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_HOST_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}(:[0-9]{1,5})?")
_TAG_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")


@dataclass(frozen=True)
class OllamaName:
    """A fully qualified Ollama model name: ``host/namespace/model:tag``."""

    host: str
    namespace: str
    model: str
    tag: str

    def __str__(self) -> str:
        return f"{self.host}/{self.namespace}/{self.model}:{self.tag}"

    def manifest_path(self, store: Path) -> Path:
        return store / "manifests" / self.host / self.namespace / self.model / self.tag


def parse_ollama_name(text: str) -> OllamaName:
    """Parse ``name``, ``name:tag``, ``ns/name:tag`` or ``host/ns/name:tag`` with Ollama's defaults."""
    rest, tag = text, DEFAULT_TAG
    last_slash = text.rfind("/")
    if ":" in text[last_slash + 1:]:
        rest, tag = text.rsplit(":", 1)
    parts = rest.split("/")
    if len(parts) > 3:
        raise UsageError(None, f"model name {quote(text)} has more than host/namespace/name:tag")
    host, namespace = DEFAULT_HOST, DEFAULT_NAMESPACE
    if len(parts) == 3:
        host, namespace, model = parts
    elif len(parts) == 2:
        namespace, model = parts
    else:
        (model,) = parts
    for kind, value, pattern in (("host", host, _HOST_PART), ("namespace", namespace, _NAME_PART),
                                 ("model", model, _NAME_PART), ("tag", tag, _TAG_PART)):
        # '.' and '..' match the patterns' character sets but would walk the store; refuse them.
        if not pattern.fullmatch(value) or set(value) <= {"."}:
            raise UsageError(None, f"model name {quote(text)}: bad {kind} {quote(value)}")
    return OllamaName(host, namespace, model, tag)


def default_ollama_store(env: Mapping[str, str] | None = None, platform: str | None = None,
                         home: Path | None = None) -> Path:
    """The store Ollama itself would use: ``$OLLAMA_MODELS``, else the platform default.

    On Linux the per-user ``~/.ollama/models`` wins when it exists; otherwise the system service's
    ``/usr/share/ollama/.ollama/models`` (where the install script puts it) if that exists.
    """
    env = os.environ if env is None else env
    platform = sys.platform if platform is None else platform
    if env.get("OLLAMA_MODELS"):
        return Path(env["OLLAMA_MODELS"])
    advice = ("pass ", Param("store"), " or set OLLAMA_MODELS")
    if platform.startswith("win"):
        home = home or Path(env.get("USERPROFILE") or home_folder(advice))
        return home / ".ollama" / "models"
    home = home or Path(env.get("HOME") or home_folder(advice))
    user = home / ".ollama" / "models"
    service = Path("/usr/share/ollama/.ollama/models")
    if platform.startswith("linux") and not user.is_dir() and service.is_dir():
        return service
    return user


def chosen_by(given: str | None, variables: Sequence[str] = (), env: Mapping[str, str] | None = None
              ) -> tuple[str | Param, ...]:
    """How a store's folder that was searched was chosen, for an error saying a name is not in it: by the
    parameter ``given`` (``store``: the command line's ``--store``), by the first of the environment
    ``variables`` that is set, or by default (said with the variables that would choose another, else the
    parameter): a user who sees which folder was searched sees why, and how to search another. In the words
    of an error's message (:class:`~ggaudit.errors.Param`: the command line says its option)."""
    env = os.environ if env is None else env
    if given is not None:
        return ("given by ", Param(given))
    variable = next((v for v in variables if env.get(v)), None)
    if variable is not None:
        return (f"from ${variable}",)
    if not variables:
        return ("the default; ", Param("store"), " names another")
    return (f"the default: {' and '.join('$' + v for v in variables)} {'is' if len(variables) == 1 else 'are'} "
            "not set",)


def _how_chosen(store: str | os.PathLike[str] | None) -> tuple[str | Param, ...]:
    """How the Ollama store searched was chosen (``store``: the one given, if any)."""
    return chosen_by(None if store is None else "store", ("OLLAMA_MODELS",))


def home_folder(advice: Words) -> Path:
    """The user's home folder, or UsageError with *advice*: with HOME unset and no passwd entry for the
    uid (a container's arbitrary user), Path.home() raises RuntimeError."""
    try:
        return Path.home()
    except (RuntimeError, KeyError, OSError):
        said = (advice,) if isinstance(advice, str) else advice
        raise UsageError(None, ("cannot tell the home folder (HOME is not set); ", *said)) from None


@dataclass(frozen=True)
class OllamaLayer:
    """One blob an Ollama manifest refers to (a layer, or the config)."""

    media_type: str
    digest: str         # 64 lowercase hex digits, validated
    size: int
    field: str          # where in the manifest: "config", "layers[2]"
    name: str | None = None     # a tensor layer's tensor name (image.tensor layers), as stored

    @property
    def subject(self) -> str:
        """What the layer is, for a report: its media type (or field), and the tensor it holds, if named."""
        kind = self.media_type or self.field
        return kind if self.name is None else f"{kind} {self.name}"


@dataclass(frozen=True)
class OllamaManifest:
    name: OllamaName
    path: Path
    store: Path
    config: OllamaLayer | None
    layers: tuple[OllamaLayer, ...]

    @property
    def blobs(self) -> tuple[OllamaLayer, ...]:
        """Every blob to check: the layers, then the config."""
        return self.layers + ((self.config,) if self.config else ())

    def model_layers(self) -> tuple[OllamaLayer, ...]:
        """The weights: the model layer(s), then the projector(s), in manifest order."""
        models = tuple(layer for layer in self.layers if layer.media_type == MEDIA_MODEL)
        return models + tuple(layer for layer in self.layers if layer.media_type == MEDIA_PROJECTOR)


def read_ollama_manifest(name: str | OllamaName, store: str | os.PathLike[str] | None = None
                         ) -> OllamaManifest:
    """Find and parse the manifest of ``name`` in ``store`` (default: ``default_ollama_store()``)."""
    parsed = parse_ollama_name(name) if isinstance(name, str) else name
    root = Path(store) if store is not None else default_ollama_store()
    path = parsed.manifest_path(root)
    _require_in_store(path, root, "manifests", "manifest")    # before is_file(), which would follow it
    if not path.is_file():
        raise ManifestError(path, (f"model {parsed} is not in the Ollama store {root} (", *_how_chosen(store), ")"))
    doc = load_json(path, "manifest")
    if not isinstance(doc, dict) or not isinstance(doc.get("layers"), list):
        raise ManifestError(path, "expected an object with a list of layers", field="layers")
    layers = tuple(_ollama_layer(entry, path, f"layers[{i}]") for i, entry in enumerate(doc["layers"]))
    config = _ollama_layer(doc["config"], path, "config") if doc.get("config") is not None else None
    return OllamaManifest(parsed, path, root, config, layers)


def _ollama_layer(entry: object, path: Path, field: str) -> OllamaLayer:
    if not isinstance(entry, dict):
        raise ManifestError(path, "expected an object", field=field)
    digest = parse_digest(entry.get("digest"), path=path, field=f"{field}.digest")
    size = entry.get("size")
    if not is_count(size):
        raise ManifestError(path, f"size {shorten(repr(size))} is not a non-negative integer",
                            field=f"{field}.size")
    media_type = entry.get("mediaType", "")
    if not isinstance(media_type, str):
        raise ManifestError(path, "mediaType is not a string", field=f"{field}.mediaType")
    name = entry.get("name")
    return OllamaLayer(media_type, digest, size, field, name if isinstance(name, str) else None)


def ollama_blob_path(store: Path, digest: str) -> Path:
    """The blob file of a validated hex digest: ``blobs/sha256-<hex>``, or the old ``sha256:<hex>``.

    Returns the new-style path when neither exists, for the report to name.
    """
    if not HEX64.fullmatch(digest):
        raise ManifestError(None, f"digest {quote(digest)} is not 64 hex digits", field="digest")
    new = store / "blobs" / f"sha256-{digest}"
    old = store / "blobs" / f"sha256:{digest}"
    path = old if not new.exists() and old.exists() else new
    _require_in_store(path, store, "blobs", "blob", field="digest")
    return path


def _require_in_store(path: Path, store: Path, folder: str, what: str, field: str | None = None) -> None:
    """ManifestError unless *path* (a file of the store's *folder*), links followed, stays in the store.

    A file of the store that is a link out of it is reported, never followed: the store is what was
    named. The store's *folder* may itself be a link (blobs moved to a bigger disk): its files are fine.
    """
    problem = confine(path, (real(store), real(store / folder)))
    if problem is not None and problem != OUTSIDE:
        raise ManifestError(path, f"{what} {problem}", field=field)
    if problem == OUTSIDE:
        leads_to = os.readlink(path) if path.is_symlink() else str(real(path))
        raise ManifestError(path, f"{what} is a link pointing outside the store: {leads_to}", field=field)


def ollama_partial_files(store: Path) -> tuple[Path, ...]:
    """Leftovers of interrupted pulls: ``blobs/sha256-<hex>-partial`` and ``-partial-N`` files."""
    blobs = store / "blobs"
    if not blobs.is_dir():
        return ()
    return tuple(sorted(p for p in blobs.iterdir() if "-partial" in p.name))


@dataclass(frozen=True)
class OllamaStoreListing:
    """Every model of a store (by its manifest's place), and the entries of ``manifests/`` that are not one."""

    store: Path
    names: tuple[OllamaName, ...]
    skipped: tuple[str, ...]        # why each odd entry was left alone, its path in the message


def list_ollama_models(store: str | os.PathLike[str] | None = None) -> OllamaStoreListing:
    """The models of ``store``: ``manifests/<host>/<namespace>/<model>/<tag>`` files whose parts are valid
    names. A folder or file that is a link pointing out of the store is skipped, never followed."""
    root = Path(store) if store is not None else default_ollama_store()
    manifests = root / "manifests"
    _require_in_store(manifests, root, "manifests", "manifests folder")
    if not manifests.is_dir():
        raise ManifestError(manifests, (f"no manifests folder: {root} is not an Ollama store (", *_how_chosen(store),
                                        ")"))
    inside = (real(root), real(manifests))
    names: list[OllamaName] = []
    skipped: list[str] = []
    for parts in _manifest_files(manifests, inside, skipped):
        try:
            names.append(parse_ollama_name(f"{parts[0]}/{parts[1]}/{parts[2]}:{parts[3]}"))
        except UsageError:
            skipped.append(f"not a model name, skipped: {os.fspath(manifests.joinpath(*parts))}")
    return OllamaStoreListing(root, tuple(sorted(names, key=str)), tuple(skipped))


def _manifest_files(manifests: Path, inside: tuple[Path, ...], skipped: list[str]) -> list[tuple[str, ...]]:
    """The relative parts of every file four levels below ``manifests`` (host, namespace, model, tag)."""
    level: list[tuple[str, ...]] = [()]
    for depth in range(4):
        deeper: list[tuple[str, ...]] = []
        for parts in level:
            for entry in sorted(os.scandir(manifests.joinpath(*parts)), key=lambda e: e.name):
                path = Path(entry.path)
                problem = confine(path, inside)
                if problem is not None:
                    skipped.append(f"{'a link pointing outside the store' if problem == OUTSIDE else problem}, "
                                   f"skipped: {os.fspath(path)}")
                elif path.is_dir() == (depth < 3):      # folders down to the tag, the tag a file
                    deeper.append((*parts, entry.name))
                else:
                    skipped.append(f"not an Ollama manifest {'folder' if depth < 3 else 'file'}, skipped: "
                                   f"{os.fspath(path)}")
        level = deeper
    return level


def ollama_blobs(store: Path) -> dict[str, Path]:
    """Every complete blob of the store by its digest (``sha256-<hex>`` or the old ``sha256:<hex>``)."""
    blobs = store / "blobs"
    if not blobs.is_dir():
        return {}
    found: dict[str, Path] = {}
    for path in sorted(blobs.iterdir()):
        match = _BLOB_FILE.fullmatch(path.name)
        if match:
            found.setdefault(match[1].lower(), path)
    return found


_BLOB_FILE = re.compile(r"sha256[-:]([0-9a-fA-F]{64})")


def ollama_entries(manifest: OllamaManifest, prefix: str = "") -> list[StoreEntry]:
    """Each blob of *manifest* (its layers, then its config; subjects after *prefix*, the model's name): the
    digest and size its layer gives, or the link out of the store its blob is (reported, never followed)."""
    located: dict[str, str | ManifestError] = {}     # per digest: 200k layers naming one blob, one lookup
    entries = []
    for layer in manifest.blobs:
        if layer.digest not in located:
            try:
                located[layer.digest] = os.fspath(ollama_blob_path(manifest.store, layer.digest))
            except ManifestError as err:
                located[layer.digest] = err
        where, subject = located[layer.digest], prefix + layer.subject
        if isinstance(where, ManifestError):
            entries.append(StoreEntry(path=where.path or "", subject=subject, read=where.path or "",
                                      problem=Problem(kind="link", subject=subject, detail=where.message)))
        else:
            entries.append(StoreEntry(path=where, subject=subject, read=where, expected=Expected(
                algorithm="sha256", digest=layer.digest, source=STORE, what=_layer_what(layer), size=layer.size)))
    return entries


def _layer_what(layer: OllamaLayer) -> str:
    if layer.field == "config":
        return "the Ollama manifest's digest of its config"
    return f"the Ollama manifest's digest of its {layer.subject} layer"


#: An Ollama manifest whose ``layers`` is empty: what verify says of it.
_NO_LAYERS = "model {name} lists no layers"


def _partials(store: Path, ours: set[str], whose: str) -> tuple[str, ...]:
    """A warning for each stray partial download of the store, saying so of one of ``ours`` (digests)."""
    said = []
    for partial in ollama_partial_files(store):
        digest = BLOB_NAME.match(partial.name)     # sha256-<hex>-partial: the name starts as a blob's
        mine = f" (a blob of {whose})" if digest and digest[1].lower() in ours else ""
        said.append(f"stray partial download: {os.fspath(partial)}{mine}")
    return tuple(said)


def ollama_orphans(store: Path, referenced: set[str]) -> list[StoreEntry]:
    """Each blob of the store that no manifest names (*referenced*: the digests the manifests name)."""
    said = Problem(kind=ORPHAN, subject="blob", detail="no manifest of the store names this blob")
    return [StoreEntry(path=os.fspath(path), subject="blob", read=os.fspath(path), problem=said)
            for digest, path in ollama_blobs(store).items() if digest not in referenced]


class OllamaStore(Store, prefix="ollama"):
    """``ollama:NAME`` (one model: its manifest's layers, each blob checked by its sha256 and size) or
    ``ollama:*`` (every model of the store, and the blobs no manifest names); ``roots.store``: the store.

    ``partials``: a model's check warns of the store's stray partial downloads; ``layers``: ``ollama:*``
    checks the layers of every model. Both are left off for the targets of ``ollama:*`` on a command line
    (:meth:`each_model`): each model is its own target, and the store's own says the rest once."""

    #: Its engine maps the model file by default (llama.cpp's loader, ``use_mmap``).
    ENGINE = ("Ollama", "mmap")

    EVERY_MODEL = "*"
    #: The kind of the report of ``ollama:*``'s search of the whole store (its blobs no manifest names).
    WHOLE_STORE = "ollama-store"
    OTHER_REPORT_KINDS = (WHOLE_STORE,)

    def __init__(self, name: str, roots: Roots, *, partials: bool = True, layers: bool = True) -> None:
        super().__init__(name, roots)
        self.partials = partials
        self.layers = layers

    def expectations(self) -> OllamaManifest:
        """The model's manifest: its layers' digests and sizes (for ``ollama:*``, :meth:`models`)."""
        return read_ollama_manifest(self.name, self.roots.store)

    def models(self) -> OllamaStoreListing:
        return list_ollama_models(self.roots.store)

    def entries(self) -> list[StoreEntry]:
        """Every blob of the model; for ``ollama:*``, of every model whose manifest can be read and lists
        layers (subjects after its name), then the orphans."""
        if not self.every_model:
            return ollama_entries(self.expectations())
        return self.listing().entries()

    def listing(self) -> StoreListing:
        """Every layer (of any kind: model, projector, tensor, draft, ...) and the config of the model:
        present, right size, right sha256; a model without an ``image.model`` layer is checked by the layers
        it has, and one listing no layer is NothingChecked (its config alone is no model). For ``ollama:*``,
        :meth:`_whole_store`."""
        if self.every_model:
            return self._whole_store()
        manifest = self.expectations()
        if not manifest.layers:
            raise NothingChecked(manifest.path, f"{_NO_LAYERS.format(name=manifest.name)}; nothing was checked")
        ours = {layer.digest for layer in manifest.blobs}
        return StoreListing(subject=str(manifest.name), kind="ollama", items=tuple(ollama_entries(manifest)),
                       empty="its manifest names no blob",
                       warnings=_partials(manifest.store, ours, "this model") if self.partials else ())

    def _whole_store(self) -> StoreListing:
        """Every layer of every model (subjects begin with the model's name), and each blob no manifest names,
        an orphan. A manifest that cannot be read is a warning (its blobs may then be listed as orphans);
        stray partial downloads too; and a manifest listing no layer. A store in which no model lists
        layers (and, without ``layers``, that holds no blob to search for orphans) checked nothing."""
        listing = self.models()
        items: list[StoreEntry | Said] = [Said(skipped) for skipped in listing.skipped]
        referenced: set[str] = set()
        models = 0      # with layers: each is checked (here, or as its own target of ollama:*)
        for name in listing.names:
            try:
                manifest = read_ollama_manifest(name, listing.store)
            except ManifestError as err:
                items.append(Said(f"manifest of {name} unreadable, its blobs may show as orphans: {err}"))
                continue
            referenced.update(layer.digest for layer in manifest.blobs)
            if not manifest.layers:     # without layers, the model's own target says so
                if self.layers:
                    items.append(Said(f"{_NO_LAYERS.format(name=name)}: nothing of it checked"))
                continue
            models += 1
            if self.layers:
                items.extend(ollama_entries(manifest, prefix=f"{name}: "))
        items.extend(ollama_orphans(listing.store, referenced))
        # Without layers (ollama:* on the command line: each model is its own target) the store's own check
        # is the search for orphans; with them, that search alone is no check of a model.
        blobs = len(ollama_blobs(listing.store))
        empty = "no model of the store lists layers" if listing.names or blobs else \
            "the store holds no model and no blob"
        return StoreListing(subject=os.fspath(listing.store), kind=self.WHOLE_STORE, items=tuple(items), empty=empty,
                       warnings=_partials(listing.store, referenced, "a model"),
                       looked_at=models + (0 if self.layers else blobs))

    def each_model(self) -> list[Part]:
        """For ``ollama:*``: each model, then the store's own search for orphans (which reads no blob)."""
        if not self.every_model:
            return super().each_model()
        listing = self.models()
        return [*(Part(self.prefix + str(name), OllamaStore(str(name), self.roots, partials=False))
                  for name in listing.names),
                Part(os.fspath(listing.store), OllamaStore(self.EVERY_MODEL, self.roots, layers=False), reads=False)]

    def redownload(self, damaged: Sequence[str]) -> str:
        blobs = ", ".join(os.path.basename(path) for path in damaged)
        return (f"the download is damaged: `ollama pull` alone keeps a blob that is already there, so delete the "
                f"damaged blob file ({blobs}, in the store's blobs folder) with Ollama stopped, or `ollama rm` every "
                f"model that uses it, then `ollama pull {self.name}`")

    def model_files(self) -> list[str]:
        """The blob of the model layer, then the projector's if the model has one."""
        if self.every_model:
            raise UsageError(None, "ollama:* is every model of the store: name one, ollama:NAME", field="model")
        manifest = self.expectations()
        layers = manifest.model_layers()
        if not layers:
            raise ManifestError(manifest.path, f"model {manifest.name} has no layer of type {MEDIA_MODEL}",
                                field="layers")
        return [os.fspath(ollama_blob_path(manifest.store, layer.digest)) for layer in layers]

    @classmethod
    def holds(cls, name: str, roots: Roots) -> bool:
        try:
            root = Path(roots.store) if roots.store is not None else default_ollama_store()
            return parse_ollama_name(name).manifest_path(root).is_file()
        except (UsageError, OSError, ValueError):     # not an Ollama name, or no store to look in
            return False

    def relied_on(self) -> list[str]:
        """Its manifest, then each blob the manifest names under both of a blob's names (``sha256-HEX``, the
        old ``sha256:HEX``: a run reads one); for ``ollama:*``, every manifest and every blob of the store. A
        manifest that cannot be read is still named: its report may not replace it."""
        if self.every_model:
            listing = self.models()
            return [os.fspath(n.manifest_path(listing.store)) for n in listing.names] + \
                [os.fspath(blob) for blob in ollama_blobs(listing.store).values()]
        root = Path(self.roots.store) if self.roots.store is not None else default_ollama_store()
        described = os.fspath(parse_ollama_name(self.name).manifest_path(root))
        try:
            manifest = self.expectations()
        except ManifestError:
            return [described]
        return [described] + [os.fspath(manifest.store / "blobs" / f"sha256{sep}{digest}")
                              for digest in {layer.digest: None for layer in manifest.blobs} for sep in "-:"]
