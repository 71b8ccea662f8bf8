"""What a GGUF file is: the bounded header parser and the Model it opens (:mod:`.layout`), the one table of
block facts (:mod:`.blocks`), small GGUFs written for tests and fixtures (:mod:`.build`) and the ``info``
view (:mod:`.info`). Names to files are a layer above, in :mod:`ggaudit.stores`."""
