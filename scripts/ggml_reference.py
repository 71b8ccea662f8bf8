"""ggml's own C code as a reference for the benchmarks: ``gguf_init_from_file`` (what every ggml program
runs to open a model) and ``ggml_validate_row_data`` (what ``llama.cpp --check-tensors`` runs), called
through ctypes from a libggml-base shared library the caller builds or installs.

Building one from llama.cpp's sources (any checkout, e.g. the vendor/ folder of the llama-cpp-python
sdist)::

    cmake -S llama.cpp/ggml -B build -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \\
          -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF
    cmake --build build --target ggml-base      # build/src/libggml-base.so
"""

from __future__ import annotations

import ctypes
import mmap
import os
from pathlib import Path

import numpy as np



class _InitParams(ctypes.Structure):
    _fields_ = [("no_alloc", ctypes.c_bool), ("ctx", ctypes.c_void_p)]


class Ggml:
    """The two entry points of one libggml-base."""

    def __init__(self, library: str | os.PathLike[str]) -> None:
        lib = ctypes.CDLL(os.fspath(library))
        self._init = lib.gguf_init_from_file
        self._init.argtypes, self._init.restype = [ctypes.c_char_p, _InitParams], ctypes.c_void_p
        self._free = lib.gguf_free
        self._free.argtypes, self._free.restype = [ctypes.c_void_p], None
        self._validate = lib.ggml_validate_row_data
        self._validate.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
        self._validate.restype = ctypes.c_bool
        for name, restype in (("gguf_get_n_tensors", ctypes.c_int64), ("gguf_get_data_offset", ctypes.c_size_t)):
            getattr(lib, name).argtypes, getattr(lib, name).restype = [ctypes.c_void_p], restype
        for name, restype in (("gguf_get_tensor_offset", ctypes.c_size_t), ("gguf_get_tensor_type", ctypes.c_int),
                              ("gguf_get_tensor_size", ctypes.c_size_t)):
            getattr(lib, name).argtypes, getattr(lib, name).restype = [ctypes.c_void_p, ctypes.c_int64], restype
        self._lib = lib

    def open(self, path: Path) -> list[tuple[int, int, int]]:
        """gguf_init_from_file with no_alloc and no ggml context (header, metadata and tensor infos, as a
        program reading the model does before it maps the data): each tensor's (type, offset, size)."""
        ctx = self._init(os.fsencode(path), _InitParams(True, None))
        if not ctx:
            raise RuntimeError(f"gguf_init_from_file failed on {path}")
        try:
            lib, base = self._lib, self._lib.gguf_get_data_offset(ctx)
            return [(lib.gguf_get_tensor_type(ctx, i), base + lib.gguf_get_tensor_offset(ctx, i),
                     lib.gguf_get_tensor_size(ctx, i)) for i in range(lib.gguf_get_n_tensors(ctx))]
        finally:
            self._free(ctx)

    def check(self, path: Path) -> bool:
        """Open the model with gguf_init_from_file, map it, and run ggml_validate_row_data over every
        tensor's bytes, as llama.cpp does for --check-tensors: True when every tensor is valid."""
        tensors = self.open(path)
        ok = True
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            data = np.frombuffer(mapped, dtype=np.uint8)
            address = data.ctypes.data      # read-only memory: ctypes' from_buffer refuses it, numpy does not
            for ggml_type, offset, size in tensors:
                ok &= bool(self._validate(ggml_type, ctypes.c_void_p(address + offset), size))
            del data
        return ok
