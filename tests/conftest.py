"""Shared test fixtures.

- ``realdata`` / ``reference``: real captures, read from ``tests/data`` (vendored: the files whose
  licence allows it, see tests/data/SOURCES.md) first, then from ../shared in place. A file in
  neither skips its test, naming the file; so a clean clone without ../shared runs every test
  whose data is vendored.
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


class DataRoot(type(Path())):  # type: ignore[misc]
    """A data folder whose children are looked up in each of ``roots`` in turn (``tests/data``
    first, then ../shared); a child in none of them skips the test, naming it. The folder itself
    is the first root that exists, so ``glob``/``iterdir`` on it list the vendored copy."""

    roots: tuple[Path, ...] = ()

    def __truediv__(self, key: str | os.PathLike[str]) -> Path:
        return self.joinpath(key)

    def joinpath(self, *parts: str | os.PathLike[str]) -> Path:
        for root in self.roots:
            path = root.joinpath(*parts)
            if path.exists():
                return path
        name = Path(self.roots[-1].name, *parts).as_posix()
        pytest.skip(f"missing {name}: not vendored in tests/data (licence, see tests/data/SOURCES.md)"
                    f" and not in {self.roots[-1].parent} (../shared is not beside this clone)")


def _data_root(name: str, *roots: Path) -> Path:
    cls = type(name, (DataRoot,), {"roots": roots})
    return cls(next((r for r in roots if r.exists()), roots[-1]))  # type: ignore[no-any-return]


@pytest.fixture(scope="session")
def realdata() -> Path:
    return _data_root("RealData", DATA / "realdata", REALDATA)


@pytest.fixture(scope="session")
def reference() -> Path:
    return _data_root("Reference", DATA / "reference", REFERENCE)


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
