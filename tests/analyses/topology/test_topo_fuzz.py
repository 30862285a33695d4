"""Hypothesis: garbage and truncated captures never crash a topology parser (ParseError or a
partial answer only)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minutiae.analyses.topology.parse.detect import parse_topology
from minutiae.analyses.topology.parse.proc_status import parse_cgroup, parse_stat, parse_status
from minutiae.analyses.topology.parse.topo_json import topology_from_json
from minutiae.errors import ParseError
from minutiae.model.topology import NodeTopology, format_cpulist, parse_cpulist, parse_hexmask

SAMPLES = [
    "nvidia_smi/ml-engineering/topo_m_8xH100_nv18_numa.txt",
    "nccl_topo/aws-ofi-nccl/p4d-24xl-topo.xml",
    "nccl_topo/azhpc-images/ndv5-topo.xml",
    "hwloc/xml/32em64t-2n8c2t-pci-wholeio.xml",
]
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _sample(realdata: Path, rel: str) -> bytes:
    p = realdata / rel
    if not p.exists():
        pytest.skip(f"missing {p}")
    return p.read_bytes()


def _parse_ok(data: bytes) -> None:
    try:
        t = parse_topology(data, "fuzz")
    except ParseError as exc:
        assert "fuzz" in str(exc)
        return
    assert isinstance(t, NodeTopology)


@pytest.mark.parametrize("rel", SAMPLES)
@FAST
@given(cut=st.floats(min_value=0.0, max_value=1.0))
def test_truncated_real_captures(realdata: Path, rel: str, cut: float) -> None:
    data = _sample(realdata, rel)
    _parse_ok(data[: int(len(data) * cut)])


@pytest.mark.parametrize("rel", SAMPLES)
@FAST
@given(pos=st.floats(min_value=0.0, max_value=1.0), junk=st.binary(min_size=1, max_size=40))
def test_corrupted_real_captures(realdata: Path, rel: str, pos: float, junk: bytes) -> None:
    data = _sample(realdata, rel)
    i = int(len(data) * pos)
    _parse_ok(data[:i] + junk + data[i + len(junk):])


@FAST
@given(st.binary(max_size=2000))
def test_garbage_bytes(data: bytes) -> None:
    _parse_ok(data)


@FAST
@given(st.text(alphabet="GPU0123 XNVPIXBHSODCAfinty\t\n-,", max_size=600))
def test_matrix_like_text(text: str) -> None:
    _parse_ok(text.encode())


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20)


@FAST
@given(st.dictionaries(st.sampled_from(["gpus", "nics", "nvmes", "paths", "numa_cpus", "facts"]),
                       json_values, max_size=6))
def test_json_garbage(obj: dict[str, object]) -> None:
    try:
        topology_from_json(obj, "fuzz.json")
    except ParseError as exc:
        assert "fuzz.json" in str(exc)


@FAST
@given(st.text(max_size=300))
def test_proc_parsers(text: str) -> None:
    parse_status(text)
    parse_stat(text)
    parse_cgroup(text)


@FAST
@given(st.lists(st.integers(min_value=0, max_value=600), max_size=50))
def test_cpulist_round_trip(cpus: list[int]) -> None:
    assert parse_cpulist(format_cpulist(cpus)) == tuple(sorted(set(cpus)))
    from minutiae.model.topology import format_hexmask
    assert parse_hexmask(format_hexmask(cpus)) == tuple(sorted(set(cpus)))


@FAST
@given(st.text(max_size=40))
def test_cpulist_garbage_raises_value_error_only(text: str) -> None:
    with contextlib.suppress(ValueError):
        parse_cpulist(text)
