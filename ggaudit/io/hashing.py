"""Digests of whole files as chunk consumers (see :mod:`ggaudit.io.fan_out`): sha256 and xxh3-128, and the
table of them a command asks for by name."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import xxhash


class Hasher:
    """A hashlib-style object (``update``, ``hexdigest``) as a chunk consumer."""

    name: str

    def __init__(self, hash_object: Any) -> None:
        self._hash = hash_object

    def update(self, offset: int, data: memoryview) -> None:
        self._hash.update(data)

    def hexdigest(self) -> str:
        return str(self._hash.hexdigest())


class Sha256(Hasher):
    """sha256 of everything it is fed, as a chunk consumer."""

    name = "sha256"

    def __init__(self) -> None:
        super().__init__(hashlib.sha256())


class Xxh3_128(Hasher):
    """xxh3-128 of everything it is fed, as a chunk consumer."""

    name = "xxh3-128"

    def __init__(self) -> None:
        super().__init__(xxhash.xxh3_128())


#: The digests of a whole file a command can ask for by name.
ALGORITHMS: dict[str, Callable[[], Sha256 | Xxh3_128]] = {"sha256": Sha256, "xxh3-128": Xxh3_128}
