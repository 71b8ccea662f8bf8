"""Array helpers shared by the jobs (scan and rows), so that neither imports the other for them."""

from __future__ import annotations

import numpy as np


def distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values, ascending: np.unique of numpy 2.4 took 20 s for 16M integers here, this 0.3 s."""
    ranked = np.sort(values)
    return ranked[np.concatenate(([True], ranked[1:] != ranked[:-1]))] if ranked.size else ranked
