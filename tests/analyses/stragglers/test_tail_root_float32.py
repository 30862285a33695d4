"""``calib._root`` on a float32 grid of increments (a float32 tail sample's histogram centres
are float32): the root of M over the values the grid holds, to the precision the docstring
promises. On the float32 grid itself ``exp(t x)`` moved in float32 steps, Newton could not
converge, and the root took 30-200 evaluations to end on a bracket ~1e-7 wide."""

from __future__ import annotations

import numpy as np
import pytest

from minutiae.analyses.stragglers.calib import TAIL_BINS, _root


@pytest.mark.parametrize(("dof", "k", "clip"), [(3.0, 0.5, 3.0), (4.0, 1.5, 3.6), (2.5, 0.5, 3.0)])
def test_root_of_float32_increments_is_the_exponent(dof: float, k: float, clip: float) -> None:
    z = (np.random.default_rng(21).standard_t(dof, 4000) * 0.6).astype(np.float32)
    counts, edges = np.histogram(np.clip(z, -clip, clip), bins=TAIL_BINS, range=(-clip, clip))
    seen = counts > 0
    p, x32 = counts[seen] / z.size, ((edges[:-1] + edges[1:]) / 2 - k)[seen]
    assert x32.dtype == np.float32
    theta = _root(p, x32)
    assert theta > 0
    assert theta == _root(p, x32.astype(np.float64))
    assert abs(float(np.dot(p, np.exp(theta * x32.astype(np.float64)))) - 1.0) < 1e-12
