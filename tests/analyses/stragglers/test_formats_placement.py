"""Ranks placed on hosts and GPUs by NCCL's communicator init lines (formats.environment), so a
straggler found in a training log is named by node and GPU as a CSV with those columns names it.
Real lines: tests/data/trainlogs/nccl_init_two_hosts.log (NVIDIA/nccl#629, nccl-tests#252)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from minutiae.analyses.stragglers.formats import join, parse_log, per_rank
from minutiae.cli.main import main

LOGS = Path(__file__).resolve().parents[2] / "data" / "trainlogs"
REAL = (LOGS / "nccl_init_two_hosts.log").read_text()
HOSTS = ("A03-R28-I49-2-6000166", "A03-R28-I49-3-9000018")


def test_the_largest_communicator_places_its_ranks() -> None:
    log = parse_log(REAL.encode(), "init.log")
    assert log.world == 16  # the 8-rank communicator of the last two lines is not the world
    assert dict((r, (h, d)) for r, h, d in log.places) == {
        15: (HOSTS[1], 7), 14: (HOSTS[1], 6), 12: (HOSTS[1], 4), 8: (HOSTS[1], 0), 9: (HOSTS[1], 1),
        2: (HOSTS[0], 2), 5: (HOSTS[0], 5), 4: (HOSTS[0], 4)}


def _init_line(rank: int) -> str:
    # NCCL 2.1x's format (src/init.cc), hosts and pids of the real lines above
    host, pid = (HOSTS[0], 58077) if rank < 8 else (HOSTS[1], 193027)
    return (f"{host}:{pid}:{pid + 60 + rank % 8} [{rank % 8}] NCCL INFO comm 0x7f30b0000d00 "
            f"rank {rank} nranks 16 cudaDev {rank % 8} busId 64000 - Init COMPLETE")


def _tee_log(slow_rank: int, steps: int = 120, onset: int = 40) -> str:
    """torchrun --tee: every rank's lines behind ``[rankN]:``, NCCL's init lines first, then NeMo
    step lines (tests/data/trainlogs/nemo.log's shape), ``slow_rank`` 12 % slower from ``onset``."""
    rng = np.random.default_rng(3)
    out = [f"[rank{r}]:{_init_line(r)}" for r in range(16)]
    for s in range(steps):
        for r in range(16):
            t = 2.5 * float(np.exp(rng.normal(0, 0.01))) * (1.12 if r == slow_rank and s >= onset else 1.0)
            out.append(f"[rank{r}]:Training epoch 0, iteration {s}/{steps} | global_step: {s} | "
                       f"reduced_train_loss: 1.1 | train_step_timing in s: {t:.4f}")
    return "\n".join(out) + "\n"


def test_per_rank_rows_carry_node_and_gpu() -> None:
    rows = per_rank(parse_log(_tee_log(11).encode(), "tee.log"))
    got = rows.select("rank", "node", "gpu").unique().sort("rank").rows()
    assert got == [(r, HOSTS[r // 8], r % 8) for r in range(16)]


def test_a_rank_without_an_init_line_leaves_the_table_unnamed() -> None:
    text = "\n".join(line for line in _tee_log(11).splitlines() if "rank 5 nranks" not in line)
    rows = per_rank(parse_log((text + "\n").encode(), "tee.log"))
    assert rows.height > 0 and "node" not in rows.columns


def test_places_of_per_rank_files_are_joined() -> None:
    text = _tee_log(11)
    parts = [parse_log("".join(line + "\n" for line in text.splitlines()
                               if line.startswith(f"[rank{r}]:")).encode(), f"rank{r}.log")
             for r in range(16)]
    log = join(parts)
    assert log.world == 16 and len(log.places) == 16


def test_stragglers_names_the_node_and_gpu_from_the_log(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "tee.log"
    path.write_text(_tee_log(11))
    main(["stragglers", str(path), "--json"])
    doc = json.loads(capsys.readouterr().out)
    (s,) = doc["suspects"]
    assert s["ranks"] == [11] and s["component"] == f"gpu:{HOSTS[1]}/3"


def test_a_restart_onto_other_nodes_names_no_node() -> None:
    """The same world initialised again with rank 11 on another host (a job resumed on a new
    allocation): naming ranks by their first host would blame a node they left; none is named."""
    moved = _init_line(11).replace(HOSTS[1], "A03-R28-I49-4-0000001")
    text = _tee_log(11) + f"[rank11]:{moved}\n"
    log = parse_log(text.encode(), "tee.log")
    assert log.places == () and any("placed on two hosts" in n for n in log.notes())
    assert "node" not in per_rank(log).columns
    first = parse_log(_tee_log(11).encode(), "a.log")
    second = parse_log(moved.encode() + b"\n", "b.log")
    assert second.world == 16 and join([first, second]).places == ()
