"""``minutiae stragglers LOG`` on logs without per-rank times: the job-level report (issue 15).

Real-shaped logs from tests/data/trainlogs/ (SOURCES.md cites each shape); the long runs are
built from the frameworks' format strings, as in test_formats_joblevel.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from minutiae.cli.main import main

DATA = Path(__file__).resolve().parents[2] / "data" / "trainlogs"


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(["stragglers", *args])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def _nemo(times: np.ndarray) -> str:
    # NeMo 2 progress_printer.py shape (tests/data/trainlogs/nemo.log)
    return "".join(
        f"Training epoch 0, iteration {i}/{times.size} | lr: 3.922e-06 | global_batch_size: 8 | "
        f"global_step: {i} | reduced_train_loss: 1.653 | train_step_timing in s: {t:.4f}\n"
        for i, t in enumerate(times))


@pytest.mark.parametrize("name", ["nemo", "torchtitan", "hf_trainer", "lightning",
                                  "megatron_deepspeed_aurora", "deepspeed_speed_flops"])
def test_real_rank0_logs_print_a_job_level_report_and_exit_0(
        name: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = _run(capsys, str(DATA / f"{name}.log"))
    assert rc == 0, (out, err)
    assert "job-level report" in out and "no lasting change in step time" in out
    assert "no per-rank times to compare ranks" in err  # what is missing is still said
    rc, out, _ = _run(capsys, str(DATA / f"{name}.log"), "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["mode"] == "job-level" and doc["suspects"] == []
    assert doc["steps"] >= 1 and doc["changes"] == []


def test_torchtitan_throughput_in_both_outputs(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = _run(capsys, str(DATA / "torchtitan.log"))
    assert "throughput (median after warm-up): tokens_per_s" in out and "tflops" in out
    _, out, _ = _run(capsys, str(DATA / "torchtitan.log"), "--json")
    tp = json.loads(out)["throughput"]
    assert tp["tokens_per_s"] > 0 and tp["tflops"] > 0 and tp["mfu"] is not None


def test_held_slowdown_is_a_finding(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    t = 2.5 * np.exp(np.random.default_rng(3).normal(0, 0.01, 1000))
    t[500:] *= 1.062
    path = tmp_path / "nemo.log"
    path.write_text(_nemo(t))
    rc, out, _ = _run(capsys, str(path))
    assert rc == 1
    (line,) = [x for x in out.splitlines() if x.startswith("step time")]
    assert line.endswith("% from iteration 500, held") and line.startswith("step time +6.")
    rc, out, _ = _run(capsys, str(path), "--json")
    (c,) = json.loads(out)["changes"]
    assert rc == 1 and c["step"] == 500 and c["held"] and c["change"] == pytest.approx(0.062,
                                                                                        abs=0.004)


def test_a_speedup_alone_is_not_a_finding(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    t = 2.5 * np.exp(np.random.default_rng(4).normal(0, 0.01, 600))
    t[300:] *= 0.92
    path = tmp_path / "nemo.log"
    path.write_text(_nemo(t))
    rc, out, _ = _run(capsys, str(path), "--json")
    (c,) = json.loads(out)["changes"]
    assert rc == 0 and c["change"] < -0.07


def test_straggler_detector_suspect_quoted(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    real = (DATA / "megatron_straggler.log").read_text().splitlines()[0]  # names rank 0
    lines = [real.replace("MxRtt/Rnk: 3468.20ms/0", f"MxRtt/Rnk: {3600 + i}.00ms/{r}")
             for i, r in enumerate([5, 5, 3, 5, 5, 9, 5, 5])]
    path = tmp_path / "sd.log"
    path.write_text("\n".join(lines) + "\n")
    rc, out, _ = _run(capsys, str(path))
    assert rc == 1
    assert "suspect: rank 5 slowest in 6/8 megatron-straggler interval(s)" in out
    assert f"  {path}:1: INFO:megatron.core.utils:[2024-03-14 23:07:56] |" in out
    rc, out, _ = _run(capsys, str(path), "--json")
    (s,) = json.loads(out)["suspects"]  # DESIGN.md: rank, node, slowdown, since_step
    assert rc == 1 and s["rank"] == 5 and s["node"] is None
    assert s["slowdown"] == pytest.approx(3604 / 3453.08 - 1, abs=0.001)
    assert "since_step" in s and s["evidence"][0].startswith(f"{path}:1: ")


def test_nvrx_reports_of_three_nodes_name_rank_76_and_its_node(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one = (DATA / "nvrx_report.log").read_bytes()
    paths = []
    for i in range(3):
        paths.append(tmp_path / f"node{i}.log")
        paths[-1].write_bytes(one)
    rc, out, _ = _run(capsys, *map(str, paths), "--json")
    (s,) = json.loads(out)["suspects"]
    assert rc == 1 and s["rank"] == 76 and s["slowdown"] == pytest.approx(1 / 0.94 - 1)
    assert s["node"] is not None and s["node"] in one.decode()
    assert any("Rank=76" in e for e in s["evidence"])


def test_a_known_format_with_nothing_to_report_is_still_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "empty_nemo.log"
    path.write_text("[NeMo I 2024-06-01 12:00:00 exp_manager:396] Experiments will be logged at x\n")
    rc, _, err = _run(capsys, str(path))
    assert rc == 3 and "minutiae: error:" in err
