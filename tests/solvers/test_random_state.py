"""The solvers' noise is the caller's numpy Generator stream: its whole 128-bit PCG64 state, in the
numba kernels too (fast DP Frank-Wolfe, its screening, the BSLS sampler)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import dpdist.solvers.fast_fw as ffw
from dpdist.solvers.samplers import BSLSSampler


def _pcg64(state: int) -> np.random.Generator:
    """A Generator in a chosen 128-bit PCG64 state (the same increment throughout)."""
    g = np.random.Generator(np.random.PCG64())
    g.bit_generator.state = {
        "bit_generator": "PCG64",
        "state": {"state": state, "inc": 0xDA3E39CB94B95BDB},
        "has_uint32": 0,
        "uinteger": 0,
    }
    return g


@pytest.mark.parametrize("screen", [None, "rnm", "adp"])
def test_fast_dp_fw_noise_depends_on_more_than_32_bits(screen):
    """Finding 1 (fixed): the numba kernels draw from the caller's numpy Generator itself -- its whole
    128-bit PCG64 state -- not from numba's legacy generator seeded with a value truncated to 32 bits
    (the sampler, Talwar's selection and the screening noise alike)."""
    from dpdist.solvers.screening import screening_plan

    rng = np.random.default_rng(3)
    X = sp.csr_matrix(np.clip(rng.normal(size=(200, 12)) * (rng.random((200, 12)) < 0.4), -1, 1))
    y = (rng.random(200) < 0.5).astype(float)
    plan = None if screen is None else screening_plan(screen, "logistic", 2.0, 12, 200, 5, 1.0, 1e-6, n_max=400)

    def path(g):
        return ffw.fast_frank_wolfe(
            X, y, 2.0, 200, selection="exponential", epsilon=1.0, delta=1e-6, screening=plan, random_state=g
        ).path

    s = 12345
    assert path(_pcg64(s)) == path(_pcg64(s))  # a fixed state (an experiment's opt-in) reproduces the run
    assert path(_pcg64(s)) != path(_pcg64(s + (1 << 100))), "states equal in their low 100 bits give the same path"
    # the noise is the Generator's stream: the fit drew far more from it than one seed
    g, one_seed = _pcg64(s), _pcg64(s)
    path(g)
    one_seed.integers(2**62)
    assert g.bit_generator.state != one_seed.bit_generator.state
    sampler = BSLSSampler(np.zeros(50), random_state=_pcg64(s))
    draws = [sampler.draw() for _ in range(40)]
    again = BSLSSampler(np.zeros(50), random_state=_pcg64(s))
    assert [again.draw() for _ in range(40)] == draws
    other = BSLSSampler(np.zeros(50), random_state=_pcg64(s + (1 << 100)))
    assert [other.draw() for _ in range(40)] != draws
