"""Training-log readers on real lines (tests/data/trainlogs/SOURCES.md gives each origin)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from minutiae.analyses.stragglers.formats import join, parse_log, per_rank, refusal
from minutiae.analyses.stragglers.formats.prefix import strip_line
from minutiae.analyses.stragglers.parse import parse_timings
from minutiae.errors import DataError, ParseError

DATA = Path(__file__).resolve().parents[2] / "data" / "trainlogs"


def _log(name: str):  # type: ignore[no-untyped-def]
    return parse_log((DATA / name).read_bytes(), name)


def test_megatron_deepspeed_and_deepspeed_in_one_real_log() -> None:
    log = _log("megatron_deepspeed_aurora.log")
    assert log.formats == ("megatron", "deepspeed")
    it = log.steps.filter(pl.col("source") == "megatron")
    assert it.select("step", "seconds", "samples_per_s", "tokens_per_s", "tflops").rows() == [
        (1, 21.1338, 1.514, 775.25, 47.23), (2, 20.2983, 4.729, 807.159, 49.17)]
    assert log.minmax.rows()[0] == (-1, "model-and-optimizer-setup", 4.79478, 4.79523)
    ds = log.ranks.filter(pl.col("step") == 2).sort("section")
    assert [(r[3], round(r[2], 5)) for r in ds.rows()] == [
        ("allreduce", 0.18181), ("backward", 15.55662), ("forward", 4.02273), ("optimizer", 0.37102)]
    # one rank only: a clear refusal that names the formats and advises per-rank logs
    msg = refusal(log)
    assert "megatron + deepspeed" in msg and "rank 0 only" in msg
    assert 'first line: "[after dataloaders are built] datetime: 2024-04-04 09:36:07"' in msg


def test_megatron_straggler_detector_names_the_slowest_rank() -> None:
    log = _log("megatron_straggler.log")
    assert log.formats == ("megatron-straggler",)
    assert [(e.rank, e.value) for e in log.evidence] == [(0, 3468.20), (30, 1570.32)]
    assert log.evidence[1].spread == pytest.approx(1570.32 / 1446.49 - 1)
    assert log.evidence[0].where == "megatron_straggler.log:1"
    assert log.evidence[0].line.startswith("INFO:megatron.core.utils:[2024-03-14 23:07:56] |")


def test_nvrx_report_worst_rank_and_nodes() -> None:
    log = _log("nvrx_report.log")
    assert [(e.source, e.rank, e.value) for e in log.evidence] == [("nvrx", 76, 0.94)]
    assert "Node=h100-001-253-012" in log.evidence[0].line


def test_nemo_1_and_2() -> None:
    log = _log("nemo.log")
    assert log.steps.select("step", "seconds").rows() == [(0, 7.126), (1, 2.505), (99, 3.130)]


def test_torchtitan_with_and_without_colours() -> None:
    log = _log("torchtitan.log")
    rows = log.steps.select("step", "rank", "tokens_per_s", "tflops", "mfu").rows()
    want = [(1, 0, 375.0, 21.73, 0.022), (10, 0, 7034.0, 407.35, 0.4119),
            (1, 0, 6922.0, 13.35, 0.0135), (20, 0, 7022.0, 406.65, 0.4112)]
    assert [r[:2] for r in rows] == [w[:2] for w in want]
    assert [r[2:] for r in rows] == [pytest.approx(w[2:]) for w in want]
    assert "\\x1b" not in refusal(log)  # the first line is plain; colours never reach a message


def test_deepspeed_throughput_and_flops_profiler() -> None:
    log = _log("deepspeed_speed_flops.log")
    rows = log.steps.select("step", "seconds", "samples_per_s", "tflops").rows()
    assert (10, None, pytest.approx(25.70428), None) in rows
    assert (20, None, pytest.approx(227.4809), None) in rows
    assert (10, pytest.approx(0.18473), None, None) in rows
    assert (10, None, None, 102.0) in rows and (10, None, 433.07, None) in rows


def test_hf_trainer_behind_docker_compose_prefix() -> None:
    # verbatim from the docker-compose log cited in tests/data/trainlogs/SOURCES.md
    line = ("training-nlp-azure-1  | {'train_runtime': 1891.9246, 'train_samples_per_second': "
            "5.816, 'train_steps_per_second': 0.365, 'train_loss': 0.31064462523529496, "
            "'epoch': 3.0}\n")
    log = parse_log(line.encode(), "compose.log")
    assert dict(log.totals)["hf-trainer.train_steps_per_second"] == 0.365


def test_hf_trainer_totals_and_bar() -> None:
    log = _log("hf_trainer.log")
    totals = dict(log.totals)
    assert totals["hf-trainer.train_steps_per_second"] == 0.365
    assert totals["hf-trainer.train_runtime"] == 1891.9246
    assert log.steps.select("step", "seconds").rows() == [(690, 2.27), (690, 2.74)]


def test_lightning_profiler_and_progress_bar_skip_validation() -> None:
    log = _log("lightning.log")
    assert dict(log.totals)["lightning.mean_step_seconds"] == 0.22579
    rows = log.steps.select("step", "seconds").rows()
    assert [r[0] for r in rows] == [450, 451]  # the validation bar is not a training step
    assert rows[0][1] == pytest.approx(1 / 5.38)


@pytest.mark.parametrize(("line", "rank", "rest"), [
    ("[default15]:  iteration 10/ 100 |", 15, "  iteration 10/ 100 |"),
    ("[rank3]:[titan] step: 1", 3, "[titan] step: 1"),
    ("15: hello", 15, "hello"),
    (" 0: INFO:megatron.core.utils:x", 0, "INFO:megatron.core.utils:x"),
    ("2: [default3]:x", 2 * 4 + 3, "x"),
    ("2024-10-23T01:29:30.123456789Z [rank7]:y", 7, "y"),
    ("[1,5]<stdout>:z", 5, "z"),
    ("     rank  3: 1180.20", None, "     rank  3: 1180.20"),
    ("training-nlp-azure-1  | {'epoch': 3.0}", None, "{'epoch': 3.0}"),  # docker compose logs
    ("Training epoch 0, iteration 1/9 | lr: 1", None, "Training epoch 0, iteration 1/9 | lr: 1"),
])
def test_launcher_prefixes(line: str, rank: int | None, rest: str) -> None:
    assert strip_line(line) == (rank, rest)


def _megatron_all(iters: int, ranks: int, slow: int = -1, since: int = 10**9) -> list[str]:
    # megatron/training/training.py training_log and megatron/core/timers.py (all option)
    out = []
    for it in range(1, iters + 1):
        fb = [1200.0 + 7.0 * ((r * 5 + it * 3) % 7) for r in range(ranks)]
        if it >= since:
            fb[slow] *= 1.2
        out.append(f" [2025-11-13 16:27:00] iteration {it:8d}/{500000:8d} | consumed samples: "
                   f"{it * 256:12d} | elapsed time per iteration (ms): {max(fb) + 150:.1f} |")
        out.append("times across ranks (ms):")
        out.append("  forward-backward:")
        out += [f"     rank {r:2d}: {t:.2f}" for r, t in enumerate(fb)]
    return out


@pytest.mark.parametrize("prefix", ["", "[default7]:", "3: ", "2026-01-02T03:04:05.5Z 3: ",
                                    "2026-01-02T03:04:05.123456789Z "])  # kubectl --timestamps
def test_megatron_all_behind_launcher_prefixes(prefix: str) -> None:
    text = "\n".join(prefix + line for line in _megatron_all(5, 4)) + "\n"
    df = parse_timings(text.encode(), "x.log")
    assert df.height == 20 and sorted(set(df["rank"].to_list())) == [0, 1, 2, 3]
    assert df.filter((pl.col("step") == 5) & (pl.col("rank") == 2))["seconds"].item() == \
        pytest.approx(1.2 + 0.007 * ((2 * 5 + 5 * 3) % 7))


def test_megatron_chunk_boundaries_keep_state() -> None:
    data = ("\n".join(_megatron_all(30, 8)) + "\n").encode()
    whole = parse_log(data, "x")
    small = parse_log(data, "x", chunk=257)
    assert whole.ranks.height == 240 and whole.ranks.equals(small.ranks)


def test_truncated_last_line_is_not_read_as_a_value() -> None:
    data = ("\n".join(_megatron_all(3, 4)) + "\n     rank  0: 11").encode()
    log = parse_log(data, "cut.log")
    assert log.ranks.height == 12 and 0.011 not in log.ranks["seconds"].to_list()
    n = data.count(b"\n") + 1
    assert log.notes() == [f"cut.log:{n}: truncated last line (no newline), not read"]


def test_rotated_logs_joined_and_duplicates_counted() -> None:
    lines = _megatron_all(10, 4)  # 7 lines per iteration
    a = ("\n".join(lines[:35]) + "\n").encode()
    b = ("\n".join(lines[28:]) + "\n").encode()  # iteration 5 in both pieces
    log = join([parse_log(a, "train.log.1"), parse_log(b, "train.log")])
    assert log.ranks.height == 40
    assert [n for n in log.notes() if "kept once" in n] == [
        "(joined files): duplicate (step, rank, timer) records in several files (rotated or "
        "overlapping logs): kept once (+3 more)"]
    cut = parse_log(("\n".join(lines[30:]) + "\n").encode(), "train.log")  # starts mid-block
    assert cut.ranks.height == 20 and cut.notes() == [
        "train.log:2: Megatron 'rank N: ms' line outside a 'times across ranks (ms):' block "
        "(log cut mid-block) (+3 more)"]


def test_mixed_formats_in_one_file() -> None:
    data = (DATA / "nemo.log").read_bytes() + (DATA / "megatron_straggler.log").read_bytes()
    log = parse_log(data, "mixed.log")
    assert log.formats == ("megatron-straggler", "nemo") and log.steps.height == 3
    assert len(log.evidence) == 2


def test_interleaved_per_rank_lines_make_a_per_rank_table() -> None:
    # NeMo 2 lines from 4 ranks interleaved by torchrun --tee into one file
    lines = [f"[rank{r}]:Training epoch 0, iteration {s}/99 | lr: 1e-4 | global_batch_size: 8 | "
             f"global_step: {s} | reduced_train_loss: 1.5 | train_step_timing in s: {2 + r / 10}"
             for s in range(3) for r in (3, 0, 2, 1)]
    df = per_rank(parse_log(("\n".join(lines) + "\n").encode(), "tee.log"))
    assert df.height == 12 and df.filter((pl.col("rank") == 3) & (pl.col("step") == 2))[
        "seconds"].item() == pytest.approx(2.3)


def test_unknown_text_refused_with_the_first_line_verbatim() -> None:
    with pytest.raises(ParseError) as err:
        parse_timings(b"Hello, World: Step 1 of MY Job\nmore\n", "x.txt")
    assert 'first line: "Hello, World: Step 1 of MY Job"' in str(err.value)


def test_recognised_but_job_level_only_says_which_and_why() -> None:
    with pytest.raises(DataError) as err:
        parse_timings((DATA / "torchtitan.log").read_bytes(), "t.log")
    msg = str(err.value)
    assert "recognised a torchtitan log with 4 step line(s) (rank 0 only)" in msg
    assert "--metrics.log_all_ranks" in msg and "timing-log-option" not in msg


def _job(ranks: int = 16, steps: int = 80, slow: int = 6, since: int = 40) -> list[list[float]]:
    import numpy as np

    rng = np.random.default_rng(7)
    t = 1.2 * np.exp(rng.normal(0, 0.01, (steps, ranks)))
    t[since:, slow] *= 1.15
    return [[float(f"{v:.5f}") for v in row] for row in t.tolist()]


def _found(df: pl.DataFrame) -> list[tuple[int, int, int]]:
    from minutiae.analyses.stragglers.analysis import analyse
    from minutiae.analyses.stragglers.prep import prepare

    report = analyse(prepare(df, "x"))
    return [(s.rank, s.since_step, s.detected_step) for s in report.suspects]


def test_per_rank_formats_find_the_slow_rank_like_the_csv_path(tmp_path: Path) -> None:
    from minutiae.analyses.stragglers.read import read_timings

    t = _job()
    csv = "step,rank,seconds,section\n" + "".join(
        f"{s},{r},{v},forward-backward\n" for s, row in enumerate(t) for r, v in enumerate(row))
    want = _found(parse_timings(csv.encode(), "job.csv"))
    assert want and want[0][0] == 6
    # Megatron --timing-log-option all (ms with 2 decimals, as timers.py prints)
    mega = []
    for s, row in enumerate(t):
        mega.append(f" iteration {s:8d}/{500000:8d} | consumed samples: {s * 256:12d} | "
                    f"elapsed time per iteration (ms): {max(row) * 1000 + 150:.1f} |")
        mega += ["times across ranks (ms):", "  forward-backward:"]
        mega += [f"     rank {r:2d}: {v * 1000:.2f}" for r, v in enumerate(row)]
    assert _found(parse_timings(("\n".join(mega) + "\n").encode(), "train.log")) == want
    # NeMo 2 from every rank, interleaved by torchrun --tee into one file
    tee = [f"[rank{r}]:Training epoch 0, iteration {s}/80 | global_step: {s} | "
           f"reduced_train_loss: 1.1 | train_step_timing in s: {v}"
           for s, row in enumerate(t) for r, v in enumerate(row)]
    assert _found(parse_timings(("\n".join(tee) + "\n").encode(), "tee.log")) == want
    # DeepSpeed wall-clock breakdown, one file per rank (srun -l labels), joined
    paths = []
    for r in range(16):
        p = tmp_path / f"rank{r}.log"
        p.write_text("".join(
            f"{r}: [2024-04-04 09:36:28,430] [INFO] [logging.py:96:log_dist] [Rank {r}] time (ms) "
            f"| fwd: {row[r] * 1000:.2f} | bwd: 0.00 | bwd_inner: 0.00 | bwd_allreduce: 0.00 | "
            f"step: 0.00\n" for row in t))
        paths.append(p)
    df, notes = read_timings(paths)
    # DeepSpeed numbers steps from 1 (no step=N line here): the same steps, one later
    assert notes == [] and _found(df.filter(pl.col("section") == "forward")) == [
        (r, s + 1, d + 1) for r, s, d in want]


@pytest.mark.parametrize("junk", [b"(\xb5/\xfd", b"x\x9c", b"x\x01"])
def test_a_log_that_starts_with_a_compression_magic_is_read_as_text(junk: bytes) -> None:
    """polars's CSV reader inflates a buffer that starts with a zstd or zlib magic (zstd raised
    OSError 'Dictionary mismatch' out of the reader): the bytes are text, lines keep numbers."""
    real = (DATA / "nemo.log").read_bytes()
    log = parse_log(junk + b" garbage\n" + real, "junk.log")
    assert log.steps.select("step", "seconds").rows() == [(0, 7.126), (1, 2.505), (99, 3.130)]
