"""Where models are kept, one class per store registered by its prefix (:mod:`.registry`), each in the module
named for that prefix: the Ollama store (:mod:`.ollama`), the Hugging Face cache (:mod:`.hf`) and
``--local-dir`` downloads (:mod:`.hf_local`), LM Studio's (:mod:`.lmstudio`) and GPT4All's (:mod:`.gpt4all`)
folders; and sha256 checksum files (:mod:`.sums`), which ``verify --sums`` names by option rather than by
prefix. A store lists what ``verify`` checks of a name as data (:mod:`.listing`), which one walker of verify
checks. :mod:`.locate` turns a MODEL into files through the registry; :mod:`.expected` gives every digest a
file should have, from every source at once (each store's :meth:`~.registry.Store.entries`, a blob's name, a
checksum file, a sha256 given): the one place ``verify`` and ``check`` both take them from. Below the jobs:
nothing here imports scan, verify, rows or cli.

No store module is imported here: the registry imports the module named for a prefix when a name of it is
first looked up (:func:`.registry.store_class`), so a command on a plain path loads none of them.
"""
