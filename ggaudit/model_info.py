"""What ``ggaudit info`` reports: a model's layout, as a report like the others (its JSON is
:func:`ggaudit.format.info.model_to_json`), told in words and on a page."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .diagnostic import Artifact, Case, Summary
from .escaping import escape, escape_path
from .format.info import bytes_per_type, model_to_json
from .format.layout import MetaValue, Model
from .page import Block, Cell, FactTable, FileMap, Heading, Legend, Span, Table
from .wording import plural, shape_text, show_value

if TYPE_CHECKING:
    from .diagnostic import Diagnostic


@dataclass(frozen=True, kw_only=True)
class ModelInfo:
    """A model's layout as a report, like the others: ``ok`` (always: describing finds nothing) and
    ``to_json()`` (:func:`model_to_json`)."""

    model: Model

    @property
    def ok(self) -> bool:
        return True

    def to_json(self) -> dict[str, Any]:
        return model_to_json(self.model)

    def diagnostics(self) -> Iterator[Diagnostic]:
        """None: describing a model finds nothing."""
        return iter(())

    # What every reporter reads (ggaudit.diagnostic.Report): the wording is below.
    def summary(self, limit: int | None = None) -> Summary:
        model = self.model
        headline = (f"model {escape_path(model.source)}: {plural(len(model.tensors), 'tensor')}, "
                    f"{plural(len(model.metadata), 'metadata key')}")
        return Summary(headline=headline, lines=tuple(_lines(model)),
                       files=tuple(Artifact(path=f.path, length=f.size) for f in model.files))

    def cases(self) -> Iterator[Case]:
        return (Case(name=f"read {escape_path(f.path)}") for f in self.model.files)

    def page(self, limit: int | None = None) -> list[Block]:
        return _page(self.model)


# --- a model's layout in words (ModelInfo.summary) ----------------------------------------------------------

def _meta_line(key: str, entry: MetaValue) -> str:
    return f"  {escape(key)} ({entry.type.name.lower()}) = {show_value(entry.value)}"


def _lines(model: Model) -> list[str]:
    lines = [f"model: {escape_path(model.source)}"]
    for f in model.files:
        lines.append(f"file: {escape_path(f.path)}: GGUF v{f.version}, {plural(f.size, 'byte')}, alignment "
                     f"{f.alignment}, data at offset {f.data_offset}, {plural(len(f.tensors), 'tensor')}, "
                     f"{plural(len(f.metadata), 'metadata key')}")
    lines.append(f"architecture: {escape(model.architecture or '(none)')}")
    lines.append(f"tensors: {len(model.tensors)}")
    lines.append("metadata:")
    lines.extend(_meta_line(k, v) for k, v in model.metadata.items())
    lines.append("tensors:")
    width = max([4] + [len(escape(t.name)) for t in model.tensors])
    lines.append(f"  {'name':<{width}}  {'type':<8} {'shape':<20} {'offset':>14} {'bytes':>14}")
    for t in model.tensors:
        shape = "x".join(str(n) for n in t.shape)
        lines.append(f"  {escape(t.name):<{width}}  {t.ggml_type.name:<8} {shape:<20} {t.offset:>14} {t.nbytes:>14}")
    lines.append("bytes per type:")
    lines.extend(f"  {name:<8} {nbytes:>14}" for name, nbytes in bytes_per_type(model.tensors).items())
    return lines


def _page(model: Model) -> list[Block]:
    facts = (("files", str(len(model.files))), ("architecture", escape(model.architecture or "(none)")),
             ("tensors", str(len(model.tensors))), ("metadata keys", str(len(model.metadata))))
    out: list[Block] = [Heading(text="Summary"), FactTable(rows=facts)]
    for f in model.files:
        tensors = sorted((t for t in model.tensors if t.path == f.path), key=lambda t: t.offset)
        segments = [Span(0, f.data_offset, "hdr", "header and tensor infos")]
        segments += [Span(t.offset, t.nbytes, f"t{i % 2}", f"tensor {escape(t.name)} ({t.ggml_type.name} "
                          f"{shape_text(t.shape)}): offset {t.offset}, {t.nbytes} bytes")
                     for i, t in enumerate(tensors)]
        out += [Heading(text=f"Map of {escape_path(f.path)}"),
                FileMap(extent=f.size, segments=tuple(segments), label=f"map of {escape_path(f.path)}",
                        legend=Legend(items=(("hdr", "header"), ("t0", "tensor"), ("t1", "tensor (next)"))))]
    out += [Heading(text="Tensors"), Table(
        head=("name", "type", "shape", "offset", "bytes"),
        rows=((Cell(text=escape(t.name), css="mono"), Cell(text=t.ggml_type.name), Cell(text=shape_text(t.shape)),
               Cell.number(t.offset), Cell.number(t.nbytes)) for t in model.tensors),
        total=len(model.tensors), what="tensors")]
    return out
