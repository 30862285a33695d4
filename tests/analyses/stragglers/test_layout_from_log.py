"""The parallel layout a training log prints at start becomes the job's layout (issue 13, item 1:
"or read from the logs where frameworks print it").

Real lines: tests/data/trainlogs/layout_lines.log (NVIDIA/Megatron-LM#1525, #512, #91; a torchtitan
run log in auroraGPT-ANL/torchtitan), cited in tests/data/trainlogs/SOURCES.md; the other
torchtitan meshes below are written with its format string (``parallel_dims.py``). The job logs below are
written with Megatron's own format strings (timers.py, training.py, NCCL's init line) from
bench/stragglers/worlds.py's timings (numpy only, no minutiae code)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from bench_worlds import worlds
from click.testing import CliRunner

from minutiae.analyses.stragglers.formats import layout_lines
from minutiae.analyses.stragglers.formats.parse import parse_log
from minutiae.analyses.stragglers.layout import PRINTED, Layout, stated
from minutiae.cli.main import cli

LOGS = Path(__file__).resolve().parents[2] / "data" / "trainlogs"
REAL = (LOGS / "layout_lines.log").read_text().splitlines()

#: Megatron-LM#1525 (2025): PP=2 on two nodes, the glued "sizes: Nonetensor-" field
M1525 = ("using world size: 2, data-parallel size: 1, context-parallel size: 1, hierarchical "
         "context-parallel sizes: Nonetensor-model-parallel size: 1, encoder-tensor-model-parallel "
         "size: 0, pipeline-model-parallel size: 2, encoder-pipeline-model-parallel size: 0")


def test_the_real_lines_are_in_the_file() -> None:
    assert M1525 in REAL


@pytest.mark.parametrize(("line", "sizes"), [
    (M1525, {"world": "2", "dp": "1", "cp": "1", "tp": "1", "pp": "2"}),
    # Megatron-LM#512 (2023): before context parallelism, "data-parallel-size"
    ("using world size: 4, data-parallel-size: 2, tensor-model-parallel size: 2, "
     "pipeline-model-parallel size: 1 ", {"world": "4", "dp": "2", "tp": "2", "pp": "1"}),
    ("  pipeline_model_parallel_size .................... 2", {"pp": "2"}),
    ("  expert_model_parallel_size ...................... 4", {"ep": "4"}),
    ("  use_tp_pp_dp_mapping ............................ True", {"order": "megatron-tp-pp-dp"}),
    (REAL[4], {"tp": "1", "pp": "1", "cp": "1", "dp": "24", "world": "24", "order": "torchtitan"}),
    ("Building 3-D device mesh with ['dp_replicate', 'dp_shard', 'cp'], [2, 1, 2]",
     {"tp": "1", "pp": "1", "cp": "2", "dp": "2", "world": "4", "order": "torchtitan"}),
    ("Building 2-D device mesh with ['pp', 'dp_shard_mod_ep', 'tp'], [2, 4, 8]", None),  # 3 names
    ("Building 2-D device mesh with ['sp', 'tp'], [2, 4]", None),        # unknown dimension
    ("  encoder_tensor_model_parallel_size .............. 0", None),
    ("  log_world_size_to_tensorboard ................... False", None),
    ("  tensor_model_parallel_size ...................... None", None),
])
def test_each_shape_reads_what_it_states(line: str, sizes: dict[str, str] | None) -> None:
    assert layout_lines.read(line) == sizes


def test_the_real_file_gives_each_layout_it_holds() -> None:
    got = [layout_lines.read(x) for x in REAL]
    assert sum(g is not None for g in got) == len(REAL)  # every line of the file is one


def _attrs(text: str) -> dict[str, frozenset[str]]:
    return dict(parse_log((text + "\n").encode(), "x.log").attrs)  # a last line ends


def test_a_log_states_its_layout_through_the_environment_reader() -> None:
    text = "\n".join([f"[default0]:{M1525}",
                      "[default0]:  expert_model_parallel_size ...................... 1",
                      "[default0]:  use_tp_pp_dp_mapping ............................ False"])
    lay, why = stated(_attrs(text))
    assert why is None and lay == Layout(tp=1, pp=2, dp=1, cp=1, ep=1, order="megatron",
                                         origin=PRINTED)


def test_two_layouts_or_a_wrong_product_are_not_used() -> None:
    two = M1525 + "\n" + M1525.replace("world size: 2", "world size: 4").replace(
        "data-parallel size: 1", "data-parallel size: 2")
    lay, why = stated(_attrs(two))
    assert lay is None and why is not None and "dp 1 and 2" in why
    bad = M1525.replace("world size: 2", "world size: 3")
    lay, why = stated(_attrs(bad))
    assert lay is None and why is not None and "world size 3" in why
    assert stated(_attrs("no layout here\n")) == (None, None)


def _megatron_job(w: worlds.World, *, layout_line: str | None, hosts: int) -> str:
    """A Megatron-LM run log: NCCL init lines placing ranks on hosts, optionally the layout
    line, then ``training_log``'s iteration line and ``--timing-log-option all`` blocks."""
    comp = np.exp(worlds.compute_log(w)) * 1000.0   # (steps, ranks) in ms
    steps, ranks = comp.shape
    per = ranks // hosts
    lines = [f"node{r // per:02d}:{100 + r}:{200 + r} [{r % per}] NCCL INFO comm "
             f"0x7f{r:010x} rank {r} nranks {ranks} cudaDev {r % per} busId {r % per}000 - "
             "Init COMPLETE" for r in range(ranks)]
    if layout_line:
        lines.append(layout_line)
    for it in range(steps):
        lines.append(f" [2025-11-13 16:27:{it % 60:02d}] iteration {it + 1:8d}/{steps:8d} |"
                     f" elapsed time per iteration (ms): {comp[it].max() + 150:.1f} |")
        lines.append("times across ranks (ms):\n  forward-backward:")
        lines += [f"     rank {r:2d}: {comp[it, r]:.2f}" for r in range(ranks)]
    return "\n".join(lines) + "\n"


def _run(tmp_path: Path, text: str, *args: str) -> tuple[dict[str, object], str]:
    path = tmp_path / "job.log"
    path.write_text(text)
    out = CliRunner().invoke(cli, ["stragglers", str(path), "--json", *args])
    assert out.exit_code in (0, 1), out.output
    return json.loads(out.stdout), out.stderr


PP8 = ("using world size: 64, data-parallel size: 1, context-parallel size: 1, hierarchical "
       "context-parallel sizes: Nonetensor-model-parallel size: 8, encoder-tensor-model-"
       "parallel size: 0, pipeline-model-parallel size: 8, encoder-pipeline-model-parallel size: 0")


def test_stages_of_one_node_are_peers_when_the_log_prints_the_layout(tmp_path: Path) -> None:
    # PP=8, TP=8, DP=1: each stage is one node, the first and last heavier from step 0. From
    # timings and node names alone that is a slow node (the analysis cannot tell); the layout
    # Megatron printed says they are stages.
    w = worlds.World("pp8_dp1", 0, pp=8, dp=1, first_stage=0.06, last_stage=0.10)
    blind, _ = _run(tmp_path, _megatron_job(w, layout_line=None, hosts=8))
    assert blind["suspects"]
    told, _ = _run(tmp_path, _megatron_job(w, layout_line=PP8, hosts=8))
    assert told["suspects"] == []
    assert told["grouping"] == f"by {PRINTED} tp=8,pp=8 (megatron order)"
    # --layout wins over the log's
    given, _ = _run(tmp_path, _megatron_job(w, layout_line=PP8, hosts=8),
                    "--layout", "tp=8,pp=8,dp=1")
    assert given["grouping"] == "by --layout tp=8,pp=8 (megatron order)"


def test_a_slow_gpu_is_still_found_with_the_printed_layout(tmp_path: Path) -> None:
    w = worlds.World("pp8_dp1", 0, pp=8, dp=1, first_stage=0.06, last_stage=0.10,
                     faults=(worlds.Fault("gpu", 19, 0.10, 60),))
    doc, _ = _run(tmp_path, _megatron_job(w, layout_line=PP8, hosts=8))
    assert [s["rank"] for s in doc["suspects"]] == [19]  # type: ignore[index]


def test_a_printed_layout_the_data_contradicts_is_not_used_and_said(tmp_path: Path) -> None:
    w = worlds.World("pp8_dp1", 0, pp=8, dp=1, first_stage=0.06, last_stage=0.10)
    wrong = PP8.replace("world size: 64", "world size: 32").replace(
        "pipeline-model-parallel size: 8,", "pipeline-model-parallel size: 4,")
    doc, _ = _run(tmp_path, _megatron_job(w, layout_line=wrong, hosts=8))
    said = [x for x in doc["warnings"] if "the layout the log prints" in x]  # type: ignore[attr-defined]
    assert len(said) == 1 and "tp=8,pp=4 (megatron order) is 32 ranks; the data has ranks 0-63" \
        in said[0] and "not used" in said[0]
    assert str(doc["grouping"]).startswith(("inferred", "one group"))
