"""Digests against what they should be (the Ollama store, the Hugging Face cache, checksum files, a blob's
own name, a tensor manifest) and model against model.

The package is also the function: ``ggaudit.verify(target, ...)`` is
:func:`ggaudit.verify.dispatch.verify`. It imports nothing else itself, so that the store readers
(:mod:`ggaudit.verify.stores`) can be used by :mod:`ggaudit.format.locate` without a cycle.
"""

from .._callable import make_callable

make_callable(__name__, "ggaudit.verify.dispatch:verify")
