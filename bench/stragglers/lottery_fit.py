"""What a persistent GPU-to-GPU spread (silicon lottery) does to the warm-up's noise fit.

    .venv/bin/python bench/stragglers/lottery_fit.py [--seeds 30] [--size 0.03]

Jobs of ``worlds.faulty`` under ``worlds.NO_AR`` (TP-shared 1 %, white 0.8 % t(4), lottery
0.7 %: no wander at all), a GPU ``--size`` slower from step 60-120, run as generated, with
the lottery set to 0, and as generated with the fit's block rows switched off (the fit as it
was before 2026-12-05: single-step lags only; the baseline, in the same run). Printed per
variant: the AR model the warm-up fit chose (phi, and ``passes``: the share of a lasting shift
its innovations keep), the model the last refit before the fault's 50 steps ran out chose, and
how many faults were found within 50 steps. The fit is ``armodel.fit``'s cautious pick; the
spread raises the ratios' variance that bounds its AR part, so the warm-up takes phi 0.99
either way; the block rows let the refits rule it out. ``MINUTIAE_SRC=DIR`` measures another
copy.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, os.environ.get("MINUTIAE_SRC") or str(ROOT.parents[1] / "src"))
sys.path.insert(0, str(ROOT))

import worlds  # noqa: E402

from minutiae.analyses.stragglers import variogram, whiten  # noqa: E402
from minutiae.analyses.stragglers.analysis import Options  # noqa: E402
from minutiae.analyses.stragglers.runs import analyse_runs  # noqa: E402

FIRST: list[object] = []
#: (tested rows, model) after each refit of the rank tests' noise state
REFITS: list[tuple[int, object]] = []
_init = whiten.NoiseState.__init__
_refit = whiten.NoiseState.refit


def _record(self, model, *a, **k):  # type: ignore[no-untyped-def]
    """The first noise model of a job (the rank tests' warm-up fit)."""
    if not FIRST:
        FIRST.append(model)
        self.watched = True
    _init(self, model, *a, **k)


def _record_refit(self, *a, **k):  # type: ignore[no-untyped-def]
    out = _refit(self, *a, **k)
    if getattr(self, "watched", False):
        REFITS.append((self.rows, self.model))
    return out


whiten.NoiseState.__init__ = _record  # type: ignore[method-assign]
whiten.NoiseState.refit = _record_refit  # type: ignore[method-assign]
BLOCKS = variogram.BLOCKS


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--size", type=float, default=0.03)
    a = ap.parse_args()
    print(f"GPU +{a.size:.0%} under TP-shared 1 % + white 0.8 % t(4), no wander; seeds 0-{a.seeds - 1}")
    variants = (("lottery sd 0.7 %", {}, BLOCKS), ("no lottery", {"lottery_sd": 0.0}, BLOCKS),
                ("lottery, lags only", {}, ()))
    for label, change, blocks in variants:
        variogram.BLOCKS = blocks
        found, fits, late = 0, collections.Counter(), collections.Counter()
        for seed in range(a.seeds):
            w = next(x for x in worlds.faulty(seed, worlds.NO_AR) if x.name == "gpu+3%")
            f = dataclasses.replace(w.faults[0], size=a.size)
            w = dataclasses.replace(w, faults=(f,), **change)
            FIRST.clear()
            REFITS.clear()
            rep = analyse_runs(worlds.table(w), w.name, None, Options())
            m = FIRST[0]
            fits[(m.phi, round(m.passes(), 1))] += 1  # type: ignore[attr-defined]
            # the model in force at the end of the fault's 50 steps (tested rows from warm-up end)
            end = f.start + 50 - Options().warmup
            m = next((x for r, x in reversed(REFITS) if r <= end), m)
            late[_bucket(m.passes())] += 1  # type: ignore[attr-defined]
            found += any(s.rank == f.target and s.detected_step - f.start + 1 <= 50
                         for s in rep.suspects)
        shown = ", ".join(f"phi {p} passes {q}: {n}" for (p, q), n in sorted(fits.items()))
        then = ", ".join(f"{k}: {n}" for k, n in sorted(late.items()))
        print(f"{label:18s} found within 50: {found}/{a.seeds}; warm-up fit ({shown}); "
              f"at the fault's 50th step ({then})")


def _bucket(passes: float) -> str:
    """A model by the share of a shift it keeps."""
    if passes >= 1.0:
        return "white"
    return "passes < 0.3" if passes < 0.3 else "passes 0.3-1"


if __name__ == "__main__":
    main()
