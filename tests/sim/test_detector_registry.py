"""The eval detector registry: one module per detector, each registered in one line with the
dataset parts it needs and the finding kinds it reports; a detector whose modules are missing
is reported as not available, a crashing one as failed, and the others still run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from minutiae.errors import ConfigError
from minutiae.scoring.score import Detection
from minutiae.sim.dataset import Dataset
from minutiae.sim.eval.detectors import PARTS, REGISTRY, Context, detectors, register
from minutiae.sim.eval.run import run_detectors

SHIPPED = ("kernel_log", "ib_counters", "telemetry", "stragglers", "slownodes", "regress")


@pytest.fixture
def scratch() -> Iterator[list[str]]:
    """Names registered by a test, removed again afterwards."""
    names: list[str] = []
    yield names
    for n in names:
        REGISTRY.pop(n, None)


def _empty(tmp_path: Path) -> Dataset:
    meta = {"nodes": 0, "gpus_per_node": 8, "start": 0.0, "end": 86400.0, "days": 1, "seed": 0}
    return Dataset(tmp_path, meta, (), (), (), ())


def test_every_detector_module_registers_itself_in_report_order() -> None:
    import pkgutil

    import minutiae.sim.eval.detectors as pkg

    got = detectors()
    names = [d.name for d in got]
    modules = {m.name for m in pkgutil.iter_modules(pkg.__path__) if m.name != "base"}
    assert set(names) >= modules and set(SHIPPED) <= modules      # one detector per module
    assert [n for n in names if n in SHIPPED] == list(SHIPPED)     # the reports' order
    for d in got:
        assert d.run.__module__ == f"minutiae.sim.eval.detectors.{d.name}"
        assert d.needs and set(d.needs) <= PARTS
        assert d.finding_kinds(), d.name


def test_rule_driven_detectors_report_their_catalogs_kinds() -> None:
    by = {d.name: set(d.finding_kinds()) for d in detectors()}
    assert {"xid", "gpu_off_bus", "xid_repeats"} <= by["kernel_log"]   # kernel_log.toml + log_counts.toml
    assert {"ib_port_down", "ib_symbol_errors"} <= by["ib_counters"]    # counters.toml, component ib
    assert {"gpu_missing", "throttle"} <= by["telemetry"]               # counters.toml, gpu + node
    assert "ib_port_down" not in by["telemetry"]
    assert by["stragglers"] == {"straggler"} and by["regress"] == {"regression"}


def test_every_kind_the_profile_names_is_one_a_detector_reports() -> None:
    """``explained_by`` names finding kinds (``xid:79``: kind ``xid``, code 79): a kind that no
    registered detector reports is a typo in the profile, and would explain nothing."""
    from minutiae.sim.world.profile import load_profile

    reported = {k for d in detectors() for k in d.finding_kinds()}
    named = {key.split(":")[0] for key in load_profile().explains.classes}
    assert named and named <= reported, sorted(named - reported)


def test_register_refuses_unknown_parts_and_a_second_detector_of_a_name(scratch: list[str]) -> None:
    with pytest.raises(ConfigError, match="unknown dataset parts"):
        register("t_parts", what="x", needs=("kern.logs",), kinds=("k",))
    with pytest.raises(ConfigError, match="kinds must be a tuple"):
        register("t_kinds", what="x", needs=("kern.log",), kinds="xid")
    with pytest.raises(ConfigError, match="registered twice"):
        register("kernel_log", what="x", needs=("kern.log",), kinds=("k",))(lambda ctx: ([], [], 0))


def test_missing_module_is_not_available_and_a_crash_is_failed(tmp_path: Path, scratch: list[str]) -> None:
    def found(ctx: Context) -> tuple[list[Detection], list[str], int]:
        return [Detection("t_ok", "n1", 10.0, "k")], ["n2: missing"], 2

    def crashes(ctx: Context) -> tuple[list[Detection], list[str], int]:
        raise RuntimeError("boom")

    scratch += ["t_ok", "t_absent", "t_crash"]
    register("t_ok", what="ok", needs=("kern.log",), kinds=("k",), order=901)(found)
    register("t_absent", what="absent", needs=("kern.log",), kinds=("k",), order=902,
             requires=("minutiae.no_such_module",))(found)
    register("t_crash", what="crash", needs=("kern.log",), kinds=("k",), order=903)(crashes)
    res = {r.name: r for r in run_detectors(_empty(tmp_path), scratch, jobs=1)}
    assert [r for r in res] == ["t_ok", "t_absent", "t_crash"]    # registry order
    assert res["t_ok"].available and res["t_ok"].reason == "ok"
    assert [d.node for d in res["t_ok"].detections] == ["n1"] and res["t_ok"].inputs == 2
    assert res["t_ok"].notes == ("n2: missing",)
    assert not res["t_absent"].available and "minutiae.no_such_module not available" in res["t_absent"].reason
    assert res["t_crash"].available and res["t_crash"].reason == "failed: RuntimeError: boom"
    assert res["t_crash"].detections == ()
