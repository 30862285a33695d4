"""Megatron-LM log reader: the exact formats printed by training_log and core/timers.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from minutiae.analyses.stragglers.parse_megatron import looks_like_megatron, parse_megatron
from minutiae.cli.main import main


def _iteration(it: int, ms: float) -> str:
    # what megatron/training/training.py training_log prints (its format specs, as f-strings)
    s = f" [2025-11-13 16:27:{it % 60:02d}]"
    s += f" iteration {it:8d}/{500000:8d} |"
    s += f" consumed samples: {it * 256:12d} |"
    s += f" elapsed time per iteration (ms): {ms:.1f} |"
    s += f" learning rate: {3e-4:.6E} |"
    s += f" global batch size: {256:5d} |"
    s += f" lm loss: {7.5:.6E} |"
    return s


def _all_ranks(times: dict[str, list[float]]) -> str:
    # megatron/core/timers.py _get_all_ranks_time_string
    out = "times across ranks (ms):"
    for name, per_rank in times.items():
        out += f"\n  {name}:"
        for rank, t in enumerate(per_rank):
            out += f"\n     rank {rank:2d}: {t:.2f}"
    return out


def _minmax(times: dict[str, tuple[float, float]]) -> str:
    out = "(min, max) time across ranks (ms):"
    for name, (lo, hi) in times.items():
        out += "\n    {}: ({:.2f}, {:.2f})".format((name + " ").ljust(48, "."), lo, hi)
    return out


def _log(iters: int = 60, ranks: int = 16, slow_rank: int = 6, slow_from: int = 40) -> str:
    rng = np.random.default_rng(4)
    lines = ["> building train, validation, and test datasets ...",
             _minmax({"model-and-optimizer-setup": (1345.37, 1359.59)}), "training ..."]
    for it in range(1, iters + 1):
        fb = 1200 * np.exp(rng.normal(0, 0.02, ranks))
        if it >= slow_from:
            fb[slow_rank] *= 1.2
        lines.append(_iteration(it, float(fb.max() + 150)))
        lines.append(_all_ranks({"forward-backward": fb.tolist(),
                                 "forward-compute": (fb * 0.3).tolist(),
                                 "optimizer": [150.0 + rng.normal(0, 1) for _ in range(ranks)]}))
    return "\n".join(lines) + "\n"


def test_parse_exact_values() -> None:
    text = "\n".join([
        _iteration(100, 1234.5),
        _all_ranks({"forward-backward": [1180.2, 1181.02], "optimizer": [50.0, 51.5]}),
        _minmax({"forward-backward": (1180.20, 1190.31)}),
        " iteration      110/  500000 | consumed samples: 1 | elapsed time per iteration (ms): 1300.0/1250.0 |",
        "[2024-09-16][INFO][training_log:661] -  iteration=       1/  635782 | consumed_samples=  768 | elapsed_time_per_iteration_ms=29570.0 | lm loss=11.1 |",
    ])
    assert looks_like_megatron(text)
    log = parse_megatron(text)
    assert log.iterations["step"].to_list() == [100, 110, 1]
    assert log.iterations["seconds"].to_list() == pytest.approx([1.2345, 1.3, 29.57])
    assert log.ranks.select("step", "rank", "section").rows() == [
        (100, 0, "forward-backward"), (100, 1, "forward-backward"), (100, 0, "optimizer"),
        (100, 1, "optimizer")]
    assert log.ranks["seconds"].to_list() == pytest.approx([1.1802, 1.18102, 0.05, 0.0515])
    assert log.minmax.select("step", "section").rows() == [(100, "forward-backward")]
    assert log.minmax.row(0)[2:] == pytest.approx((1.1802, 1.19031))


def test_nested_timers_dropped_when_forward_backward_present() -> None:
    log = parse_megatron(_log(iters=2, ranks=2))
    assert set(log.ranks["section"].to_list()) == {"forward-backward", "optimizer"}
    assert log.minmax.rows()[0][1] == "model-and-optimizer-setup"


def test_stragglers_on_megatron_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "train.log"
    path.write_text(_log())
    rc = main(["stragglers", str(path), "--json"])
    cap = capsys.readouterr()
    doc = json.loads(cap.out)
    assert rc == 1
    (s,) = doc["suspects"]
    assert s["rank"] == 6 and s["node"] is None and s["component"] == "rank:6"
    # 320 warm-up rank-steps cannot rule out one-step spikes at the false-alarm budget, so the
    # fast test needs 4 steps at its clip (docs/stragglers.md, noise model) and says so
    assert 40 <= s["since_step"] <= 41 and s["detected_step"] <= 43 and s["basis"] == "compute"
    assert any("needs 4 steps at its clip" in w for w in doc["warnings"])
    assert 0.15 < s["slowdown"] < 0.25


def test_iteration_lines_only_get_the_job_level_report(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    # rank 0's iteration lines only: no rank comparison (said, with the option that gives one),
    # but the job-level report: the +6 % from iteration 300 is a finding (exit 1)
    rng = np.random.default_rng(7)
    ms = 1000.0 * np.exp(rng.normal(0, 0.01, 600)) * np.where(np.arange(1, 601) >= 300, 1.06, 1.0)
    path = tmp_path / "train.log"
    path.write_text("\n".join(_iteration(i, float(ms[i - 1])) for i in range(1, 601)) + "\n")
    rc = main(["stragglers", str(path)])
    cap = capsys.readouterr()
    assert rc == 1
    assert str(path) in cap.err and "600 iteration line(s)" in cap.err
    assert "--timing-log-option all" in cap.err
    (change,) = [x for x in cap.out.splitlines() if x.startswith("step time ")]
    assert change.endswith("% from iteration 300, held")
    assert float(change.split()[2]) == pytest.approx(6.0, abs=0.5)
    flat = tmp_path / "flat.log"
    flat.write_text("\n".join(_iteration(i, 1000.0 + (i % 3)) for i in range(1, 60)) + "\n")
    assert main(["stragglers", str(flat)]) == 0
    assert "no lasting change in step time" in capsys.readouterr().out


def test_truncated_block_keeps_what_was_read() -> None:
    text = _log(iters=3, ranks=4)
    cut = text[: text.rfind("rank  2")]
    log = parse_megatron(cut)
    last = log.ranks.filter(log.ranks["step"] == 3)
    # forward-backward complete, forward-compute dropped as nested, optimizer cut after rank 1
    assert last["rank"].to_list() == [0, 1, 2, 3, 0, 1]
    assert last["section"].to_list() == ["forward-backward"] * 4 + ["optimizer"] * 2
