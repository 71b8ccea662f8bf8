"""Digests against what they should be (the Ollama store, the Hugging Face cache, checksum files, a blob's
own name, a tensor manifest) and model against model.

The package is also the function: ``ggaudit.verify(target, ...)`` is
:func:`ggaudit.verify.dispatch.verify`. It imports nothing else itself: importing one of its modules
runs no other. The stores whose expectations it checks are :mod:`ggaudit.stores`, a layer below.
"""

from .._callable import make_callable

make_callable(__name__, "ggaudit.verify.dispatch:verify")
