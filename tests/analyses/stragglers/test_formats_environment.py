"""The run's environment (NCCL, CUDA driver, network, NCCL_* settings, DeepSpeed/torch versions)
and its hosts from the training log, recorded into the run history (issue 15).

Real lines: tests/data/trainlogs/nccl_*.log and ds_report_env.log (SOURCES.md gives each URL),
tests/data/h200/loaded/nccl-init.log (NCCL 2.28.9 on an H200, captured by this project). The
two-run history at the end is built from the real 2.21.5 lines and NeMo's step line format.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minutiae.analyses.stragglers.formats import environment, join, parse_log
from minutiae.analyses.stragglers.joblevel import analyse_job, log_record
from minutiae.cli.main import main

DATA = Path(__file__).resolve().parents[2] / "data"
LOGS = DATA / "trainlogs"
H200 = DATA / "h200" / "loaded" / "nccl-init.log"


def _read(name: str):  # type: ignore[no-untyped-def]
    return parse_log((LOGS / name).read_bytes(), name)


def _attrs(log) -> dict[str, set[str]]:  # type: ignore[no-untyped-def]
    return {k: set(v) for k, v in log.attrs.items()}


@pytest.mark.parametrize(("name", "want", "hosts"), [
    ("nccl_2.4.7_hosts.log", {"nccl": {"2.4.7"}, "nccl_cuda": {"9.2"},
                              "nccl_net_plugin": {"internal"}},
     ("ip-172-31-0-11", "ip-172-31-10-182", "ip-172-31-15-113", "ip-172-31-7-247",
      "ip-172-31-15-231", "ip-172-31-3-113", "ip-172-31-10-149", "ip-172-31-11-73")),
    ("nccl_2.4.7_env.log", {"nccl": {"2.4.7"}, "nccl_cuda": {"10.0"},
                            "env.NCCL_IB_DISABLE": {"0"}, "nccl_net_plugin": {"internal"}},
     ("master_node", "secondary_node")),
    ("nccl_2.10.3_aws_ofi.log", {"nccl": {"2.10.3"}, "nccl_cuda": {"11.3"},
                                 "nccl_net": {"AWS Libfabric"}, "aws_ofi_nccl": {"1.3.0aws"}},
     ("algo-1",)),
    ("nccl_2.14.3_ray.log", {"nccl": {"2.14.3"}, "nccl_cuda": {"11.8"}, "cuda_driver": {"12.2"},
                             "nccl_net_plugin": {"internal"}}, ("jamin-g2-cluster-a-0",)),
    ("nccl_2.18.5_two_nodes.log", {"nccl": {"2.18.5"}, "nccl_cuda": {"12.0"},
                                   "cuda_driver": {"12.2"}, "nccl_net": {"IB"},
                                   "env.NCCL_IB_HCA": {"mlx5_4"},
                                   "nccl_net_plugin": {"internal"}}, ("node2", "node4")),
    ("nccl_2.19.3_two_nodes.log", {"nccl": {"2.19.3"}, "nccl_cuda": {"12.3"},
                                   "cuda_driver": {"12.0"}, "nccl_net": {"IB"},
                                   "nccl_net_plugin": {"internal"}}, ("dgxh100-4", "dgxh100-3")),
    ("nccl_2.21.5_two_nodes.log", {"nccl": {"2.21.5"}, "nccl_cuda": {"12.4"},
                                   "cuda_driver": {"12.6"}}, ("kolyoz1", "kolyoz2")),
    ("nccl_2.21.5_cloudwatch.log", {"nccl": {"2.21.5"}, "nccl_cuda": {"12.8"},
                                    "cuda_driver": {"12.4"}, "env.NCCL_SOCKET_IFNAME": {"eth0"}},
     ("ip-10-36-29-253",)),
    ("nccl_2.5.6_tagged.log", {"nccl_net_plugin": {"internal"}},
     ("crow-ib-new-nccl-256-info-19",)),
    ("nccl_2.22.3_ibext.log", {"nccl_net": {"IBext_v8"}, "cuda_driver": {"12.6"}},
     ("job-3bb823c0-6d27-4312-8094-1c5910bf9b51-worker-0",)),
    ("nccl_hpcx_sharp.log", {"nccl_net": {"IBext"}, "nccl_net_plugin": {"NCCL RDMA Plugin v6"},
                             "nccl_collnet_plugin": {"SHARP"}}, ("qh100-gpu19", "qh100-gpu20")),
    ("nccl_warn_socket.log", {"nccl_net": {"Socket"}}, ("DESKTOP-NJJ0SFQ",)),
    ("ds_report_env.log", {"torch": {"2.3.0+cu121"}, "deepspeed": {"0.15.5+46d7d0d1"},
                           "torch_cuda": {"12.1"}}, ()),
])
def test_real_lines_give_the_environment_and_hosts(name: str, want: dict[str, set[str]],
                                                   hosts: tuple[str, ...]) -> None:
    log = _read(name)
    assert _attrs(log) == want
    assert log.hosts == hosts
    assert log.formats == () and log.skipped == ()  # facts only: no format, nothing skipped


def test_nccl_2_28_on_the_h200() -> None:
    log = parse_log(H200.read_bytes(), "nccl-init.log")
    assert _attrs(log) == {"nccl": {"2.28.9"}, "nccl_cuda": {"13.0"}, "cuda_driver": {"13.0"},
                           "nccl_net": {"Socket"}, "nccl_net_plugin": {"internal"}}
    # NCCL_TOPO_DUMP_FILE (set in that run) names a per-run file: not an attribute
    assert "NCCL_TOPO_DUMP_FILE set by environment" in H200.read_text()
    assert log.hosts == ("vm",)


def test_a_warn_line_names_its_host() -> None:
    line = (LOGS / "nccl_warn_socket.log").read_text().splitlines()[0]
    assert "NCCL WARN" in line
    assert parse_log(line.encode() + b"\n", "w.log").hosts == ("DESKTOP-NJJ0SFQ",)


@pytest.mark.parametrize("prefix", [" 3: ", "[rank3]:", "[default3]:", "[1,3]<stdout>:",
                                    "2024-10-23T01:29:30.123456789Z "])
def test_launcher_prefixes_do_not_hide_the_host(prefix: str) -> None:
    text = "".join(prefix + line + "\n"
                   for line in (LOGS / "nccl_2.19.3_two_nodes.log").read_text().splitlines())
    log = parse_log(text.encode(), "p.log")
    assert log.hosts == ("dgxh100-4", "dgxh100-3")
    assert _attrs(log)["nccl"] == {"2.19.3"}


def test_a_mixed_image_keeps_both_versions_in_one_file_and_across_files() -> None:
    a, b = ((LOGS / n).read_bytes() for n in ("nccl_2.19.3_two_nodes.log",
                                             "nccl_2.21.5_two_nodes.log"))
    one = parse_log(a + b, "mixed.log")
    joined = join([parse_log(a, "a.log"), parse_log(b, "b.log")])
    for log in (one, joined):
        assert _attrs(log)["nccl"] == {"2.19.3", "2.21.5"}
        assert _attrs(log)["cuda_driver"] == {"12.0", "12.6"}
        assert log.hosts == ("dgxh100-4", "dgxh100-3", "kolyoz1", "kolyoz2")


def _nemo(times: list[float]) -> str:
    # NeMo 2 progress_printer.py shape (tests/data/trainlogs/nemo.log)
    return "".join(
        f"Training epoch 0, iteration {i}/{len(times)} | lr: 3.922e-06 | global_batch_size: 8 | "
        f"global_step: {i} | reduced_train_loss: 1.653 | train_step_timing in s: {t:.4f}\n"
        for i, t in enumerate(times))


def test_nccl_lines_change_nothing_else_a_log_gives() -> None:
    steps = _nemo([2.5, 2.6, 2.4, 2.5])
    nccl = (LOGS / "nccl_2.18.5_two_nodes.log").read_text()
    plain, mixed = parse_log(steps.encode(), "n.log"), parse_log((nccl + steps).encode(), "n.log")
    assert mixed.formats == plain.formats == ("nemo",)
    assert mixed.steps.drop("line").equals(plain.steps.drop("line"))
    assert plain.attrs == {} and plain.hosts == ()
    assert mixed.hosts == ("node2", "node4")


def test_deepspeed_engine_version_line() -> None:
    # format string: deepspeed runtime/engine.py log_dist(f"DeepSpeed info: version={...}, ...")
    line = ("[2024-07-10 14:14:49,403] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed info: "
            "version=0.14.0, git-hash=unknown, git-branch=unknown\n")
    assert _attrs(parse_log(line.encode(), "d.log")) == {"deepspeed": {"0.14.0"}}


def _one(line: str):  # type: ignore[no-untyped-def]
    return parse_log((line + "\n").encode(), "bad.log")


@pytest.mark.parametrize("junk", ["garbage", "2.x.9", "2.28.9+cuda", "9" * 5000, "\x00\x01"])
def test_garbage_after_nccl_version_is_counted_not_kept(junk: str) -> None:
    log = _one(f"vm:1:1 [0] NCCL INFO NCCL version {junk}")
    assert "nccl" not in log.attrs and log.hosts == ("vm",)
    assert any("NCCL version line without a readable version" in n for n in log.notes())


def test_absurd_hosts_and_values_are_not_kept() -> None:
    log = _one("h" * 10_000 + ":1:1 [0] NCCL INFO Using network " + "x" * 10_000)
    assert log.hosts == () and log.attrs == {}
    notes = " ".join(log.notes())
    assert "host name longer than 253" in notes and "nccl_net: value" in notes


def test_many_hosts_values_and_settings_are_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(environment, "MAX_HOSTS", 50)
    lines = [f"n{i}:1:1 [0] NCCL INFO NCCL version 2.{i}.1+cuda12.{i % 10}" for i in range(200)]
    lines += [f"n0:1:1 [0] NCCL INFO NCCL_X{i} set by environment to {i}" for i in range(100)]
    log = parse_log(("\n".join(lines) + "\n").encode(), "many.log")
    assert len(log.hosts) == 50 and log.hosts[:2] == ("n0", "n1")
    assert all(len(v) == environment.MAX_VALUES for k, v in log.attrs.items() if "nccl" in k)
    assert sum(k.startswith("env.") for k in log.attrs) == environment.MAX_ENV
    counts = {s.reason.split(":")[0]: s.count for s in log.skipped}
    assert counts["more than 50 hosts in NCCL line prefixes"] == 150
    # settings with unreadable values: the notes are as bounded as the settings kept
    bad = "".join(f"n0:1:1 [0] NCCL INFO NCCL_Y{i} set by environment to {'v' * 200}\n"
                  for i in range(1000))
    assert len(parse_log(bad.encode(), "bad.log").skipped) == 1 + environment.MAX_ENV
    joined = join([log, parse_log(b"m1:1:1 [0] NCCL INFO Using network IB\n", "m.log")])
    assert len(joined.hosts) == 50 and "m1" not in joined.hosts
    assert any(s.where == "(joined files)" and s.count == 1 for s in joined.skipped)


def test_a_million_distinct_hosts_stay_bounded() -> None:
    data = b"".join(b"h%d:1:1 [0] NCCL INFO Using network IB\n" % i for i in range(10**6))
    log = parse_log(data, "big.log")
    assert len(log.hosts) == environment.MAX_HOSTS
    assert log.hosts[-1] == f"h{environment.MAX_HOSTS - 1}"
    (note,) = log.skipped
    assert note.count == 10**6 - environment.MAX_HOSTS


NCCL_BITS = ["vm:1:1 [0] NCCL INFO ", "NCCL version ", "cudaDriverVersion ", "Using network ",
             "NET/Plugin: Loaded net plugin ", " (v6)", "NCCL_IB_HCA set by environment to ",
             "2.28.9+cuda13.0", "13000", ":", " ", "[0]", "\n", "\r", "\x1b[0m", "ä", "+cuda",
             "DeepSpeed info: version=", "torch version ....... ", "NCCL WARN ", "x.cc:12 "]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(NCCL_BITS) | st.text(max_size=8), max_size=40))
def test_any_mix_of_nccl_fragments_reads_without_a_traceback(parts: list[str]) -> None:
    log = parse_log("".join(parts).encode(errors="surrogatepass") + b"\n", "fuzz.log")
    assert all(0 < len(v) <= environment.MAX_VALUES for v in log.attrs.values())
    assert all(v and len(v) <= environment.MAX_TEXT and v.isprintable()
               for vals in log.attrs.values() for v in vals)
    assert all(0 < len(h) <= environment.MAX_HOST for h in log.hosts)


def test_log_record_carries_attrs_and_nodes() -> None:
    text = (LOGS / "nccl_2.19.3_two_nodes.log").read_text() + _nemo([2.5] * 30)
    log = parse_log(text.encode(), "r.log")
    rec = log_record(log, analyse_job(log), "r1", "llama", 1.7e9)
    assert rec.nodes == ("dgxh100-4", "dgxh100-3")
    assert rec.attrs["nccl"] == frozenset({"2.19.3"}) and rec.value == pytest.approx(2.5)


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_whatchanged_names_the_nccl_change_between_two_logged_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nccl = (LOGS / "nccl_2.21.5_two_nodes.log").read_text()
    newer = nccl.replace("NCCL version 2.21.5+cuda12.4", "NCCL version 2.28.9+cuda12.4")
    assert newer != nccl
    t = 2.5 * np.exp(np.random.default_rng(7).normal(0, 0.005, 60))
    db = tmp_path / "runs.db"
    for run, head, scale in (("r1", nccl, 1.0), ("r2", newer, 1.08)):
        log = tmp_path / f"{run}.log"
        log.write_text(head + _nemo((t * scale).tolist()))
        rc, _, err = _run(capsys, "regress", "--record-log", str(log), "--db", str(db),
                          "--run-id", run, "--signature", "llama-8b")
        assert rc == 0, err
        assert "nccl 2.2" in err and "2 node(s)" in err
    rc, out, err = _run(capsys, "whatchanged", "r1", "r2", "--db", str(db), "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["change"] == pytest.approx(0.08, abs=0.01)
    diffs = {d["key"]: (d["a"], d["b"]) for d in doc["differences"] if d["kind"] == "attr"}
    assert diffs == {"nccl": ("2.21.5", "2.28.9")}  # same hosts, driver, CUDA: only NCCL differs
    assert doc["run_b"]["nodes"] == ["kolyoz1", "kolyoz2"]
    # two runs cannot test it, and the reason given is that, not "never varies"
    (nccl_diff,) = [d for d in doc["differences"] if d["key"] == "nccl"]
    assert nccl_diff["effect"] is None and "fewer than 3 runs" in nccl_diff["summary"]


def test_a_history_of_logged_runs_gives_the_nccl_change_an_effect(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import os

    nccl = (LOGS / "nccl_2.21.5_two_nodes.log").read_text()
    newer = nccl.replace("NCCL version 2.21.5+cuda12.4", "NCCL version 2.28.9+cuda12.4")
    rng = np.random.default_rng(7)
    db = tmp_path / "runs.db"
    for k in range(12):  # six runs on each version, an hour apart, run-to-run noise 1 %
        head, scale = (nccl, 1.0) if k < 6 else (newer, 1.08)
        t = 2.5 * scale * np.exp(rng.normal(0, 0.01)) * np.exp(rng.normal(0, 0.005, 40))
        log = tmp_path / f"k{k}.log"
        log.write_text(head + _nemo(t.tolist()))
        os.utime(log, (1.7e9 + 3600 * k, 1.7e9 + 3600 * k))
        assert _run(capsys, "regress", "--record-log", str(log), "--db", str(db), "--run-id",
                    f"k{k}", "--signature", "llama-8b", "--json")[0] == 0
    rc, out, _ = _run(capsys, "whatchanged", "k5", "k6", "--db", str(db), "--json")
    (first,) = json.loads(out)["differences"]
    assert (first["key"], first["a"], first["b"]) == ("nccl", "2.21.5", "2.28.9")
    assert first["effect"]["change"] == pytest.approx(0.08, abs=0.02)
    assert first["effect"]["p_value"] < 0.001
    _, out, _ = _run(capsys, "regress", "--db", str(db), "--json")
    assert [r["name"] for r in json.loads(out)["rollouts"]] == ["nccl 2.21.5 → 2.28.9"]
