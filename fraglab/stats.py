"""Summary statistics of repeated measurements: the one place they are computed."""
from __future__ import annotations

import numpy as np


def summary(values) -> dict:
    """``n, median, p10, p90, min, max, mean, std (sample, ddof=1), iqr`` of ``values`` as plain
    floats (percentiles interpolate linearly). An empty input gives ``{"n": 0}``."""
    x = np.asarray(values, dtype=np.float64).ravel()
    if x.size == 0:
        return {"n": 0}
    q10, q25, q50, q75, q90 = np.percentile(x, (10, 25, 50, 75, 90))
    return {"n": int(x.size), "median": float(q50), "p10": float(q10), "p90": float(q90),
            "min": float(x.min()), "max": float(x.max()), "mean": float(x.mean()),
            "std": float(x.std(ddof=1)) if x.size > 1 else 0.0, "iqr": float(q75 - q25)}
