"""One walker per kind of expectation: each reads what a store, checksum file or manifest says a file
should be, checks the files against it (:mod:`ggaudit.verify.collect`, :mod:`ggaudit.verify.compare`) and
returns a :class:`~ggaudit.verify.report.VerifyReport`. ``listing`` (every store: what its
:meth:`~ggaudit.stores.registry.Store.listing` lists; ``ollama`` and ``hf`` give it by the store's name),
``sums`` (checksum files, a blob's name, a given sha256), ``manifest`` (either manifest format), ``tensors``
(ggaudit's tensor manifest) and ``llama_hash`` (llama-gguf-hash's lines)."""
