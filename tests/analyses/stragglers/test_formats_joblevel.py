"""Job-level analysis of training logs with rank 0's step times or slowest-rank reports only."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from minutiae.analyses.stragglers.formats import join, parse_log
from minutiae.analyses.stragglers.joblevel import analyse_job, job_record
from minutiae.history.record import Metric

DATA = Path(__file__).resolve().parents[2] / "data" / "trainlogs"


def _nemo(times: list[float]) -> bytes:
    # NeMo 2 progress_printer.py shape (tests/data/trainlogs/nemo.log)
    return "".join(
        f"Training epoch 0, iteration {i}/{len(times)} | lr: 3.922e-06 | global_batch_size: 8 | "
        f"global_step: {i} | reduced_train_loss: 1.653 | train_step_timing in s: {t:.4f}\n"
        for i, t in enumerate(times)).encode()


def _noisy(n: int, seed: int = 3, noise: float = 0.01) -> np.ndarray:
    return 2.5 * np.exp(np.random.default_rng(seed).normal(0, noise, n))


def test_a_held_slowdown_from_iteration_500() -> None:
    t = _noisy(1000)
    t[500:] *= 1.062
    report = analyse_job(parse_log(_nemo(t.tolist()), "nemo.log"))
    assert len(report.changes) == 1
    c = report.changes[0]
    assert c.step == 500 and c.held and c.change == pytest.approx(0.062, abs=0.004)
    assert report.lines()[1] == f"step time {c.change * 100:+.1f} % from iteration 500, held"


def test_a_transient_slowdown_says_until_when() -> None:
    t = _noisy(600, seed=5)
    t[200:320] *= 1.10
    (a, b) = analyse_job(parse_log(_nemo(t.tolist()), "nemo.log")).changes
    assert abs(a.step - 200) <= 1 and not a.held and a.until == b.step and a.change > 0.08
    assert abs(b.step - 320) <= 1 and b.held and b.change < -0.07


def test_noise_and_spikes_alone_make_no_change_point() -> None:
    for seed in range(20):
        t = _noisy(400, seed=seed, noise=0.03)
        t[np.random.default_rng(seed).integers(0, 400, 4)] *= 3.0  # checkpoint saves, GC pauses
        report = analyse_job(parse_log(_nemo(t.tolist()), "n.log"))
        assert report.changes == (), (seed, report.changes)


def test_torchtitan_throughput_and_per_token_changes() -> None:
    rng = np.random.default_rng(1)
    lines = []
    for step in range(1, 301):
        tps = 7000 * np.exp(rng.normal(0, 0.005)) * (0.94 if step >= 150 else 1.0)
        lines.append(f"[rank0]:[titan] 2025-06-04 08:51:58,557 - root - INFO - step: {step:2}  "
                     f"loss: 10.7069  memory: 30.99GiB(32.62%)  tps: {round(tps):,}  "
                     f"tflops: {tps * 0.058:,.2f}  mfu: {tps * 0.0059:.2f}%")
    report = analyse_job(parse_log(("\n".join(lines) + "\n").encode(), "titan.log"))
    assert report.unit == "per-token" and report.changes[0].step == 150
    assert report.changes[0].change == pytest.approx(1 / 0.94 - 1, abs=0.01)
    assert report.after_last_change.tokens_per_s == pytest.approx(7000 * 0.94, rel=0.01)
    assert report.throughput.mfu is not None and 0.3 < report.throughput.mfu < 0.5
    assert report.lines()[1].startswith("time per token +6.")
    rec = job_record(report, "titan-1", "llama3-8b/64", 1.7e9)
    assert rec.metric is Metric.TOKENS_PER_S and rec.value == pytest.approx(
        report.throughput.tokens_per_s)


def test_straggler_detector_rank_named_most_intervals_is_a_suspect() -> None:
    real = (DATA / "megatron_straggler.log").read_text().splitlines()[0]  # names rank 0
    lines = [real.replace("MxRtt/Rnk: 3468.20ms/0", f"MxRtt/Rnk: {3600 + i}.00ms/{r}")
             for i, r in enumerate([5, 5, 3, 5, 5, 9, 5, 5])]
    report = analyse_job(parse_log(("\n".join(lines) + "\n").encode(), "sd.log"))
    (s,) = report.suspects
    assert (s.rank, s.named, s.intervals) == (5, 6, 8) and s.spread == pytest.approx(
        3604 / 3453.08 - 1, abs=0.001)
    assert s.evidence[0].startswith("sd.log:1: INFO:megatron.core.utils:[2024-03-14 23:07:56] |")
    assert {r.rank for r in report.ranks if not r.suspect} == {3, 9}
    assert "suspect: rank 5 slowest in 6/8 megatron-straggler interval(s)" in report.lines()[1]


def test_nvrx_reports_across_files_joined() -> None:
    one = (DATA / "nvrx_report.log").read_bytes()
    logs = [parse_log(one, f"node{i}.log") for i in range(3)]
    report = analyse_job(join(logs))
    assert [r.rank for r in report.suspects] == [76]
    assert report.suspects[0].spread == pytest.approx(1 / 0.94 - 1)


def test_megatron_deepspeed_real_log_records_a_run() -> None:
    report = analyse_job(parse_log((DATA / "megatron_deepspeed_aurora.log").read_bytes(), "a.log"))
    assert report.steps == 2 and report.changes == ()
    assert report.throughput.tflops == pytest.approx((47.23 + 49.17) / 2)
    rec = job_record(report, "r1", "llama-7b/tp2", 1.712e9)
    assert rec.metric is Metric.SECONDS_PER_STEP
    assert rec.value == pytest.approx(float(np.exp(np.median(np.log([21.1338, 20.2983])))))


def test_regress_records_a_log_into_the_history(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from minutiae.cli.regress import command
    from minutiae.history.store import RunStore

    log = tmp_path / "train.log"
    log.write_bytes((DATA / "megatron_deepspeed_aurora.log").read_bytes())
    db = tmp_path / "runs.db"
    res = CliRunner().invoke(command, ["--record-log", str(log), "--run-id", "llama-1",
                                       "--signature", "llama-7b/tp2", "--db", str(db), "--json"])
    assert res.exit_code == 0, res.output
    (run,) = RunStore(db).load()
    assert (run.run_id, run.signature) == ("llama-1", "llama-7b/tp2")
    assert run.value == pytest.approx(float(np.exp(np.median(np.log([21.1338, 20.2983])))))
    bad = CliRunner().invoke(command, ["--record-log", str(log), "--db", str(db)])
    assert bad.exit_code != 0 and "needs --db, --run-id and --signature" in bad.output + str(
        bad.exception)
