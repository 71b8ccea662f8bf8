"""A metadata key that contradicts the file (:class:`MetadataFinding`): what ``consistency`` and the rule
tables it runs (``loader_rules``, ``vocab_merges``) all yield, in a module of its own so that they need not
import one another."""

from __future__ import annotations

from typing import Any, ClassVar

from ..json_shape import json_key, json_record, to_json

#: The kind (ggaudit.kinds) of every finding here.
METADATA = "metadata"
ERROR, WARNING = "error", "warning"


@json_record
class MetadataFinding:
    """A metadata key whose value contradicts the file: ``key`` and its ``value`` (an array by its length),
    ``offset`` where that value is stored (None: the key is absent), ``tensor`` the tensor it contradicts
    (None: another key, or the tensor list as a whole), and in words ``expected`` (what the key says) and
    ``actual`` (what the file holds). ``severity``: ``error``, or ``warning`` for ``general.file_type``."""

    JSON_DEF: ClassVar[str] = "metadata_finding"

    kind: str = json_key(default=METADATA, values=(METADATA,))
    severity: str = json_key(default=ERROR, values=(ERROR, WARNING))
    path: str = json_key(name="file")
    key: str
    value: Any = json_key(schema={})        # as the header holds it: any JSON value
    offset: int | None = json_key(minimum=0)
    tensor: str | None
    expected: str
    actual: str

    def to_json(self) -> dict[str, Any]:
        return to_json(self)
