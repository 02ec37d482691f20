"""Parameter validation in one place.

Every public entry point validates its privacy parameters with these helpers, so an
impossible value (epsilon <= 0, delta outside [0, 1), NaN, infinite sensitivity, ...)
fails fast with a message that names the parameter and the value -- the value only of a
privacy parameter, never of the data (``check_scores`` names the parameter alone).
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from dpdist.exceptions import ParameterError


def _as_real(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, np.floating, np.integer)):
        raise ParameterError(f"{name} must be a real number, got {value!r}")
    x = float(value)
    if math.isnan(x):
        raise ParameterError(f"{name} must not be NaN")
    return x


def check_epsilon(value: object, name: str = "epsilon") -> float:
    """Return ``value`` as a float if it is a finite epsilon > 0, else raise ParameterError."""
    x = _as_real(name, value)
    if not (x > 0 and math.isfinite(x)):
        raise ParameterError(f"{name} must be finite and > 0, got {x!r}")
    return x


def check_delta(value: object, name: str = "delta", *, allow_zero: bool = True) -> float:
    """Return ``value`` as a float if it lies in [0, 1) (or (0, 1) without ``allow_zero``)."""
    x = _as_real(name, value)
    if allow_zero:
        if not 0.0 <= x < 1.0:
            raise ParameterError(f"{name} must lie in [0, 1), got {x!r}")
    elif not 0.0 < x < 1.0:
        raise ParameterError(f"{name} must lie in (0, 1), got {x!r}")
    return x


def check_positive(value: object, name: str) -> float:
    """Return ``value`` as a float if it is finite and > 0 (sensitivities, scales, bounds)."""
    x = _as_real(name, value)
    if not (x > 0 and math.isfinite(x)):
        raise ParameterError(f"{name} must be finite and > 0, got {x!r}")
    return x


def check_count(value: object, name: str, minimum: int = 1) -> int:
    """Return ``value`` as an int if it is an integer >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, np.integer)):
        raise ParameterError(f"{name} must be an integer, got {value!r}")
    k = int(value)
    if k < minimum:
        raise ParameterError(f"{name} must be >= {minimum}, got {k}")
    return k


def check_scores(scores: object, name: str = "scores") -> np.ndarray:
    """Return a 1-d float64 array of finite scores with at least one entry.

    Scores are a function of the data, so the message of a non-finite score names the parameter
    only: never which entry is not finite, nor its value (NaN, +inf or -inf).
    """
    arr = np.asarray(scores, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise ParameterError(f"{name} must be a non-empty 1-d array, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ParameterError(f"{name} must be finite (every entry)")
    return arr
