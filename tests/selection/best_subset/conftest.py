"""Fixtures of the BSS tests (helpers in bss_helpers.py)."""

from __future__ import annotations

import pytest
from bss_helpers import small_problem


@pytest.fixture(params=[("squared", 0), ("squared", 1), ("hinge", 0), ("hinge", 1)], ids=lambda v: f"{v[0]}-{v[1]}")
def small(request):
    loss, seed = request.param
    return small_problem(loss, seed)
