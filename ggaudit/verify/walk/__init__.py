"""One walker per kind of expectation: each reads what a store, checksum file or manifest says a file
should be, checks the files against it (:mod:`ggaudit.verify.collect`, :mod:`ggaudit.verify.compare`) and
returns a :class:`~ggaudit.verify.report.VerifyReport`. ``ollama`` (a model, the whole store), ``hf`` (the
Hugging Face cache, a ``--local-dir`` folder), ``sums`` (checksum files, a blob's name, a given sha256),
``folders`` (LM Studio's and GPT4All's folders), ``manifest`` (either manifest format), ``tensors``
(ggaudit's tensor manifest) and ``llama_hash`` (llama-gguf-hash's lines)."""
