"""Randomness for mechanisms.

Noise comes from OS entropy by default: ``check_random_state(None)`` returns a fresh
``numpy.random.Generator`` seeded from ``os.urandom`` through ``SeedSequence``. A fixed
integer seed or an existing Generator is an explicit opt-in for reproducible
experiments; a released result must not be produced with a seed anybody else knows.

Known limitation: noise is drawn in IEEE double precision. Floating-point side channels
of textbook Laplace sampling (Mironov 2012) are not mitigated.
"""

from __future__ import annotations

import hashlib
import numbers
import secrets

import numpy as np

from dpdist.exceptions import ParameterError

RandomState = None | int | np.random.Generator


def check_random_state(random_state: RandomState) -> np.random.Generator:
    """Turn ``random_state`` into a Generator.

    ``None`` -> fresh OS entropy (the default for every release); ``int`` -> a seeded
    Generator (experiments only); a ``Generator`` -> used as is.
    """
    if random_state is None:
        return np.random.default_rng()
    if isinstance(random_state, np.random.Generator):
        return random_state
    if isinstance(random_state, (numbers.Integral, np.integer)) and not isinstance(random_state, bool):
        if int(random_state) < 0:
            raise ParameterError(f"random_state must be >= 0, got {random_state}")
        return np.random.default_rng(int(random_state))
    raise ParameterError(
        f"random_state must be None (OS entropy), a non-negative int seed or a numpy Generator, got {random_state!r}"
    )


def derive_seed(seed: int | None, purpose: str) -> int | None:
    """The experiment seed of one release: None (OS entropy) without ``seed``, else a 64-bit seed of
    its own per ``purpose``, so that releases seeded from one ``seed`` draw independent streams (one
    stream shared by two releases would correlate their noise and their charges would not compose)."""
    if seed is None:
        return None
    return int.from_bytes(hashlib.sha256(f"{seed}/{purpose}".encode()).digest()[:8], "little")


def random_name() -> str:
    """A public dataset name that is not a function of the data: ``ds-`` and 8 random hex digits."""
    return f"ds-{secrets.token_hex(4)}"
