"""The straggler designs' special functions in plain Python agree with scipy's, and the
matrix path of ``minutiae stragglers`` imports neither scipy nor polars (their imports were
0.6-1.4 s of a 3.8 s run on a 10,000 x 2,000 Parquet file)."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy.special import betaincinv, ndtri

from minutiae.analyses.stragglers.specfun import beta_cdf, beta_median, normal_quantile

SPIKES = [0, 1, 2, 5, 17, 100, 1000, 30000, 10**6]
SAMPLES = [1, 3, 10, 40, 320, 1000, 10000, 400000, 40000000, 10**9]


@pytest.mark.parametrize(("spikes", "samples"),
                         [(s, n) for s, n in itertools.product(SPIKES, SAMPLES) if s <= n])
def test_beta_median_is_scipys(spikes: int, samples: int) -> None:
    a, b = spikes + 0.5, samples - spikes + 0.5
    want = float(betaincinv(a, b, 0.5))
    got = beta_median(a, b)
    assert got == pytest.approx(want, rel=1e-10)
    assert beta_cdf(got, a, b) == pytest.approx(0.5, abs=1e-9)


@pytest.mark.parametrize("p", [1e-15, 1e-9, 1e-6, 1e-3, 0.05, 0.5, 0.9, 0.999, 1 - 1e-9])
def test_normal_quantile_is_ndtri(p: float) -> None:
    assert normal_quantile(p) == pytest.approx(float(ndtri(p)), rel=1e-12, abs=1e-12)


def test_normal_quantile_ends() -> None:
    assert normal_quantile(0.0) == -np.inf and normal_quantile(1.0) == np.inf


def test_matrix_path_imports_no_scipy_or_polars(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    steps, ranks = 60, 16
    sec = rng.lognormal(0.0, 0.02, (steps, ranks))
    sec[30:, 5] *= 1.3
    table = pa.table({"step": np.repeat(np.arange(steps), ranks),
                      "rank": np.tile(np.arange(ranks), steps), "seconds": sec.ravel()})
    path = tmp_path / "t.parquet"
    pq.write_table(table, path)
    code = ("import io, contextlib, json, sys\n"
            "from minutiae.cli.main import main\n"
            f"sys.argv = ['minutiae', 'stragglers', {str(path)!r}, '--json']\n"
            "out = io.StringIO()\n"
            "with contextlib.redirect_stdout(out):\n"
            "    rc = main()\n"
            "print(json.dumps({'rc': rc, 'mods': [m for m in ('scipy', 'polars') "
            "if m in sys.modules], 'report': json.loads(out.getvalue())}))\n")
    got = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                    check=True).stdout.strip().splitlines()[-1])
    assert got["mods"] == []
    assert got["rc"] == 1 and [s["ranks"] for s in got["report"]["suspects"]] == [[5]]
