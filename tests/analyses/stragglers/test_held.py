"""The size a suspect held when found (``held.py``): its excursion's mean less its largest step,
so one GC pause or Student-t tail among a few steps is no fault's size (``floor.size``), while a
transient fault's size, held on every step, still counts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from minutiae.analyses.stragglers.analysis import Options, StragglerAnalysis, analyse
from minutiae.analyses.stragglers.detect import RECENT
from minutiae.analyses.stragglers.floor import size
from minutiae.analyses.stragglers.held import after_onset, held_peak
from minutiae.analyses.stragglers.prep import TimingMatrix
from minutiae.analyses.stragglers.types import Basis, Scope, Suspect
from minutiae.testing.synth.stragglers import Fault, FaultKind, SynthJob, SynthSpec, as_matrix


def _held(values: list[float], before: list[float] | None = None, block_from: int = 0) -> float:
    """One column whose excursion holds ``values`` (the first ``block_from`` of them before the
    block, in ``before``'s tail)."""
    inside = np.array(values[block_from:], dtype=np.float32)[:, None]
    steps = np.arange(block_from, len(values))
    prior = np.array((before or []) + values[:block_from], dtype=np.float32)[:, None]
    sums = np.array([[sum(values)], [len(values)]])
    return float(held_peak(sums, inside, np.ones_like(inside, dtype=bool), steps,
                           np.array([0]), np.array([inside.shape[0] - 1]), np.array([0]),
                           prior, RECENT)[0])


def test_one_spike_among_few_steps_is_not_held() -> None:
    spike = [math.log(1.279), math.log(1.085)]          # job 100196's two steps
    assert math.isnan(_held(spike))                      # less the spike, one step is left
    assert math.isnan(_held([0.25]))                     # one step holds nothing
    three = [math.log(1.307), math.log(1.113), math.log(1.12)]
    assert _held(three) == pytest.approx((math.log(1.113) + math.log(1.12)) / 2)
    steady = [0.30, 0.29, 0.31, 0.30, 0.28]               # a transient fault's steps
    assert _held(steady) == pytest.approx(np.mean([0.30, 0.29, 0.30, 0.28]))  # less 0.31
    # the steps before the block count alike (an excursion across blocks)
    assert _held(steady, before=[float("nan"), 0.9], block_from=2) == _held(steady)


def _suspect(slowdown: float, peak: float, held: float, since: int = 1865,
             after: float = float("nan")) -> Suspect:
    return Suspect(0, "n1", 0, None, Scope.GPU, "gpu:n1/0", (0,), Basis.STEP, slowdown,
                   slowdown - 0.02, slowdown + 0.02, since, 1881, "slow", 1.0, slowdown, 1.0,
                   peak=peak, held=held, after=after)


def test_a_one_step_alarms_size_since_onset_is_taken_without_that_step() -> None:
    """Job 101126 of the simulator's week: a +34 % GC pause on the second-to-last logged step
    pushed a rank's slow test over; its mean since onset (+20.9 %) is that pause and one normal
    step. Without the pause nothing is left; with no later step, it waits."""
    total, cnt = np.array([0.3404 - 0.0307, 0.30 * 6, 0.3404]), np.array([2.0, 6.0, 1.0])
    peak, count = np.array([0.3404, 0.30, 0.3404]), np.array([1.0, 1.0, 1.0])
    got = after_onset(total, cnt, peak, count)
    assert got[0] == pytest.approx(-0.0307) and got[1] == pytest.approx(0.30)
    assert math.isnan(got[2])
    # an excursion of several steps: the plain mean since onset
    assert after_onset(np.array([0.9]), np.array([3.0]), np.array([0.4]),
                       np.array([2.0]))[0] == pytest.approx(0.3)
    spike = _suspect(0.209, 0.405, float("nan"), since=1881, after=-0.03)
    assert size(spike) == pytest.approx(-0.03)
    assert math.isnan(size(_suspect(0.405, 0.405, float("nan"), since=1881)))
    # a fault that alarmed on its first step and stayed: its size stands
    assert size(_suspect(0.31, 0.35, float("nan"), since=1881, after=0.30)) == pytest.approx(0.30)
    assert size(_suspect(0.31, 0.35, float("nan"), since=1881, after=0.30), held=False) == 0.31


def test_size_counts_what_was_held_not_the_spike() -> None:
    assert size(_suspect(0.068, 0.207, 0.085)) == pytest.approx(0.085)
    assert size(_suspect(0.068, 0.207, float("nan"))) == pytest.approx(0.068)
    assert size(_suspect(0.02, 0.30, 0.28)) == pytest.approx(0.28)


def _transient() -> tuple[SynthJob, TimingMatrix]:
    spec = SynthSpec(ranks=64, steps=300, stages=1, seed=3, noise=0.03, diurnal=0.0,
                     checkpoint_every=0, gc_rate=0.0, loader_rate=0.0,
                     faults=(Fault(FaultKind.GPU, 5, 0.3, 200, 208),))
    job = SynthJob(spec)
    return job, as_matrix(job, job.block(0, spec.steps))


def test_a_transient_fault_keeps_its_size_whole_file_and_step_by_step() -> None:
    """+30 % for 8 of 300 steps averages ~2 % since its onset: its held size keeps it, the
    same whether the analysis saw the file at once or one step at a time."""
    job, m = _transient()
    whole = analyse(m, Options())
    assert [s.component for s in whole.suspects] == [job.component(job.spec.faults[0])]
    warm = Options().warmup
    a = StragglerAnalysis(m.slice(0, warm), Options())
    for t in range(m.steps.size):
        a.update(m.slice(t, t + 1))
    step = a.report()
    got = [(s.component, s.since_step, s.detected_step) for s in step.suspects]
    assert got == [(s.component, s.since_step, s.detected_step) for s in whole.suspects]
    assert step.suspects[0].held == pytest.approx(whole.suspects[0].held, rel=1e-5)
    assert whole.suspects[0].held > 0.2
