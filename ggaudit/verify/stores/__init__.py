"""Where models are kept and the digests each place promises: the Ollama store (:mod:`.ollama`), the Hugging
Face cache (:mod:`.hf_cache`) and sha256 checksum files (:mod:`.sums`)."""
