"""Manifests ggaudit writes and reads: the per-tensor manifest (:mod:`.tensor`) and llama.cpp's
``llama-gguf-hash`` lines (:mod:`.llama_hash`); JSON reading with limits is :mod:`ggaudit.stores.small_files`."""
