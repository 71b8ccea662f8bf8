"""What a GGUF file is: the bounded header parser and the Model it opens (:mod:`.layout`), the one table of
block facts (:mod:`.blocks`), small GGUFs written for tests and fixtures (:mod:`.build`), names to files
(:mod:`.locate`) and the ``info`` view (:mod:`.info`)."""
