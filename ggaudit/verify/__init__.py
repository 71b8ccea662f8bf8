"""Digests against what they should be (the Ollama store, the Hugging Face cache, checksum files, a blob's
own name, a tensor manifest) and model against model.

The function is :func:`ggaudit.verify` (:func:`ggaudit.verify.dispatch.verify`): the front door keeps that
name the function once this package is imported, so its modules are imported by name (``from ggaudit.verify
import dispatch``). It imports nothing else itself: importing one of its modules runs no other. The stores
whose expectations it checks are :mod:`ggaudit.stores`, a layer below.
"""
