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


# ------------------------------------------------------------------------------ declared constraints
#
# An estimator declares each parameter's constraints in ``_parameter_constraints`` (scikit-learn's
# style): a list of the constraints the value must meet; ``None`` in the list admits None, and
# "no_validation" skips the parameter (its estimator checks it where it is used, e.g. against another
# parameter). The messages name the parameter and its value (a parameter's value is public, never the data's).


class Constraint:
    """One rule a parameter's value must follow; ``check`` raises ParameterError naming the parameter."""

    def check(self, value: object, name: str) -> None:
        raise NotImplementedError


class Epsilon(Constraint):
    """A finite epsilon > 0 (:func:`check_epsilon`)."""

    def check(self, value: object, name: str) -> None:
        check_epsilon(value, name)


class Delta(Constraint):
    """A delta in [0, 1), or in (0, 1) with ``zero=False`` (:func:`check_delta`)."""

    def __init__(self, *, zero: bool = True) -> None:
        self.zero = zero

    def check(self, value: object, name: str) -> None:
        check_delta(value, name, allow_zero=self.zero)


class Positive(Constraint):
    """A finite number > 0 (:func:`check_positive`)."""

    def check(self, value: object, name: str) -> None:
        check_positive(value, name)


class Count(Constraint):
    """An integer >= ``minimum`` (:func:`check_count`)."""

    def __init__(self, minimum: int = 1) -> None:
        self.minimum = minimum

    def check(self, value: object, name: str) -> None:
        check_count(value, name, self.minimum)


class AtLeast(Constraint):
    """A number >= ``low``, finite unless ``finite=False``."""

    def __init__(self, low: float, *, finite: bool = True) -> None:
        self.low = low
        self.finite = finite

    def check(self, value: object, name: str) -> None:
        what = "a finite number" if self.finite else "a number"
        try:
            x = _as_real(name, value)
        except ParameterError:
            raise ParameterError(f"{name} must be {what} >= {self.low:g}, got {value!r}") from None
        if not (x >= self.low and (math.isfinite(x) or not self.finite)):
            raise ParameterError(f"{name} must be {what} >= {self.low:g}, got {value!r}")


class Between(Constraint):
    """A number strictly between ``low`` and ``high`` (both ends included with ``closed=True``);
    ``text``: how the message states the interval (default ``(low, high)`` or ``[low, high]``)."""

    def __init__(self, low: float, high: float, *, closed: bool = False, text: str | None = None) -> None:
        self.low = low
        self.high = high
        self.closed = closed
        left, right = ("[", "]") if closed else ("(", ")")
        self.text = text or f"{left}{low:g}, {high:g}{right}"

    def check(self, value: object, name: str) -> None:
        x = _as_real(name, value)
        if not (self.low <= x <= self.high if self.closed else self.low < x < self.high):
            raise ParameterError(f"{name} must lie in {self.text}, got {value!r}")


class Boolean(Constraint):
    """True or False (a numpy bool too)."""

    def check(self, value: object, name: str) -> None:
        if not isinstance(value, (bool, np.bool_)):
            raise ParameterError(f"{name} must be True or False, got {value!r}")


class Options(Constraint):
    """One of the listed values."""

    def __init__(self, *values: object) -> None:
        self.values = values

    def check(self, value: object, name: str) -> None:
        if not any(value is v or _equal(value, v) for v in self.values):
            raise ParameterError(f"{name} must be one of {self.values}, got {value!r}")


def _equal(value: object, option: object) -> bool:
    if option is None or isinstance(value, bool) != isinstance(option, bool):
        return False
    try:
        return bool(value == option)
    except (TypeError, ValueError):  # an array compares element-wise: not an option
        return False


def validate_params(owner: object, constraints: dict[str, object]) -> None:
    """Check every parameter of ``owner`` (an estimator) against its declared ``constraints``."""
    for name, rules in constraints.items():
        if rules == "no_validation":
            continue
        value = getattr(owner, name)
        if not isinstance(rules, list):
            raise TypeError(f"the constraints of {name} must be a list or 'no_validation'")
        if value is None and None in rules:
            continue
        checks = [r for r in rules if isinstance(r, Constraint)]
        if value is None and not checks:
            raise ParameterError(f"{name} must not be None")
        for rule in checks:
            rule.check(value, name)
