"""Where models are kept, one class per store registered by its prefix (:mod:`.registry`): the Ollama store
(:mod:`.ollama`), the Hugging Face cache (:mod:`.hf_cache`) and ``--local-dir`` downloads (:mod:`.hf_local`),
LM Studio's (:mod:`.lmstudio`) and GPT4All's (:mod:`.gpt4all`) folders; and sha256 checksum files
(:mod:`.sums`), which ``verify --sums`` names by option rather than by prefix. :mod:`.locate` turns a
MODEL into files through the registry. Below the jobs: nothing here imports scan, verify, rows or cli.

Every store module is imported here, so each store is registered before any name is looked up.
"""

from . import gpt4all, hf_cache, hf_local, lmstudio, ollama

__all__ = ["gpt4all", "hf_cache", "hf_local", "lmstudio", "ollama"]
