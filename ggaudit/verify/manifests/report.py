"""The report of making a manifest (``ggaudit manifest``): the manifest made, and where it was written."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...diagnostic import Case, Summary
from ...escaping import escape, escape_message, escape_path
from ...io.output_files import STDOUT
from ...wording import plural

if TYPE_CHECKING:   # the report type loads neither manifest module
    from ...diagnostic import Diagnostic
    from ...page import Block
    from .llama_hash import LlamaHashManifest
    from .tensor import TensorManifest


@dataclass(frozen=True, kw_only=True)
class ManifestWritten:
    """What ``ggaudit manifest`` made, as a report: the manifest, and where it was written (``-``, stdout,
    or a file's path). Its JSON is the manifest's own (``format``/``version`` name it, as in the file)."""

    output: str
    manifest: TensorManifest | LlamaHashManifest

    @property
    def ok(self) -> bool:
        return True

    def diagnostics(self) -> Iterator[Diagnostic]:
        """None: making a manifest finds nothing."""
        return iter(())

    # What every reporter reads (ggaudit.diagnostic.Report): the wording is below.
    def summary(self, limit: int | None = None) -> Summary:
        lines = tuple(_lines(self))
        # A manifest written to stdout is the output asked for, not a report about it: -q keeps it whole.
        headline = "manifest written to stdout" if self.output == STDOUT else lines[0]
        return Summary(headline=headline, lines=lines, counted={"output": self.output},
                       whole_when_quiet=self.output == STDOUT)

    def cases(self) -> Iterator[Case]:
        yield Case(name=f"manifest written to {escape_path(self.output)}")

    def page(self, limit: int | None = None) -> list[Block]:
        """Nothing but its text report: what was written where."""
        return []

    def to_json(self) -> dict[str, Any]:
        from .llama_hash import LlamaHashManifest, llama_hash_to_json
        from .tensor import tensor_manifest_to_json

        if isinstance(self.manifest, LlamaHashManifest):
            return llama_hash_to_json(self.manifest)
        return tensor_manifest_to_json(self.manifest)


# --- a manifest made, in words (ManifestWritten.summary) -------------------------------------------------

def _lines(written: ManifestWritten) -> list[str]:
    """What was written where; with ``-o -`` the manifest itself (stdout is where it was written)."""
    from .llama_hash import LlamaHashManifest
    from .tensor import tensor_manifest_text

    built = written.manifest
    if isinstance(built, LlamaHashManifest):
        return _llama_hash_lines(built, written.output)
    if written.output == STDOUT:
        return tensor_manifest_text(built).removesuffix("\n").split("\n")
    groups = sum(len(t.groups) for t in built.tensors)
    lines = [f"wrote {escape_path(written.output)}: {plural(len(built.files), 'file')}, "
             f"{plural(len(built.tensors), 'tensor')}, {plural(groups, 'row group')}"]
    lines.extend(f"  {escape(f.name)}: {plural(f.size, 'byte')}, sha256 {f.sha256}" for f in built.files)
    return lines


def _llama_hash_lines(built: LlamaHashManifest, output: str) -> list[str]:
    """With ``-o -`` the lines as llama-gguf-hash prints them: a name holding a control or invisible
    character is shown escaped here (the file written with ``-o FILE`` holds it exactly)."""
    from .llama_hash import llama_hash_text

    if output == STDOUT:
        return [escape_message(line) for line in llama_hash_text(built).removesuffix("\n").split("\n")]
    models = [h for h in built.lines if h.tensor is None]
    tensors = len({(h.path, h.tensor) for h in built.lines if h.tensor is not None})
    lines = [f"wrote {escape_path(output)}: {plural(len(built.lines), 'llama-gguf-hash line')} "
             f"({', '.join(built.types)}), {plural(tensors, 'tensor')}"]
    lines.extend(f"  {escape_path(h.path)}: {h.type} {h.hex} (all tensor data)" for h in models)
    return lines
