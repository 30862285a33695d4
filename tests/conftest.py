"""Shared test fixtures.

- ``realdata``: ../shared/realdata read in place (tests skip, naming the path, when it is absent).
- ``slurm_conf`` / ``prom_url`` / ``kubeconfig``: the real services started by ``make test``
  (scripts/services/up.sh). Without them the tests skip with a message; under ``make test``
  (MINUTIAE_REQUIRE_SERVICES=1) a missing service fails the test instead of skipping it.

Slurm nodes are shared by the suite; each area owns a range so tests never collide:
gpu001-gpu008 node checks (`check --slurm`), gpu009-gpu040 controller/agent e2e,
gpu041-gpu064 backend contract tests (Slurm vs Kubernetes suite).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
REALDATA = SHARED / "realdata"
REFERENCE = SHARED / "reference"
DATA = Path(__file__).resolve().parent / "data"


def _require(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"missing {path} (../shared is not beside this clone)")
    return path


@pytest.fixture(scope="session")
def realdata() -> Path:
    return _require(REALDATA)


@pytest.fixture(scope="session")
def reference() -> Path:
    return _require(REFERENCE)


def _service(var: str, what: str) -> str:
    value = os.environ.get(var)
    if value:
        return value
    msg = f"{what} not running: {var} unset (start it with `make services`)"
    if os.environ.get("MINUTIAE_REQUIRE_SERVICES") == "1":
        pytest.fail(msg)
    pytest.skip(msg)


@pytest.fixture(scope="session")
def slurm_conf() -> str:
    return _service("MINUTIAE_SLURM_CONF", "Slurm")


@pytest.fixture(scope="session")
def prom_url() -> str:
    return _service("MINUTIAE_PROM_URL", "Prometheus")


@pytest.fixture(scope="session")
def prom_targets() -> str:
    return _service("MINUTIAE_PROM_TARGETS", "Prometheus")


@pytest.fixture(scope="session")
def kubeconfig() -> str:
    return _service("MINUTIAE_KUBECONFIG", "kube-apiserver")
