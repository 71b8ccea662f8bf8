"""The platform package: everything that talks to the OS about files and processes, per OS, lives here.

Each module is one room, imported by name (``from ggaudit.io.positioned import pread``); this package
re-exports nothing, so importing one room loads only what it needs.

- ``system``: which OS this is (``WINDOWS``, ``LINUX``, ``MACOS``).
- ``opening``: opening files read-only (``open_readonly``, ``open_fd``, ``fs_path``), regular files only.
- ``identity``: ``FileIdentity``, whether a file is still the one that was opened.
- ``positioned``: reads at an offset (``pread``, ``pread_into``, ``pread_exact``): POSIX ``pread``,
  Windows ``ReadFile`` with an ``OVERLAPPED``.
- ``windows``: kernel32 through ctypes (the prototypes, ``OVERLAPPED``, ``ERROR_HANDLE_EOF``).
- ``advice``: read-ahead hints (posix_fadvise, madvise).
- ``libc``: the C library through ctypes, for the page-cache and filesystem calls.
- ``page_cache``: one file's pages in the page cache: ``cache_state`` (cachestat, mincore) and ``evict``
  (fadvise, msync).
- ``direct_shares_cache``: whether direct reads of a file come from the page cache after all (statfs magic,
  mount options, statx, file flags, FIEMAP; a probe).
- ``hashing``: the whole-file digests as chunk consumers (``Sha256``, ``Xxh3_128``, ``ALGORITHMS``).
- ``fan_out``: one read feeding many consumers (``read_through``, ``feed``, ``ChunkConsumer``, ``Progress``).
- ``processes``: ``available_cores``, ``die_with_parent``, ``SigintBlocked``, ``unblock_sigint``.
- ``output_files``: writing an output file atomically, never over an input (``write_output_file``,
  ``check_output``, ``sync_folder``).
"""
