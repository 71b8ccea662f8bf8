"""The evidence layer, below ``rows`` and ``check``: the read paths (:mod:`.readers`, one pass over a whole
file through one of them: :mod:`.whole`), and which bytes are right by evidence."""
