"""The backend registry: one line per backend, its declared capabilities checked when made,
its undo hint (the exact strings the controller printed before the registry existed)."""

from __future__ import annotations

import pytest

import minutiae.schedulers as schedulers
from minutiae.errors import BackendError, ConfigError
from minutiae.schedulers import BACKENDS, Backend, BulkStates, make_backend, undo_hint
from minutiae.schedulers.dryrun import DryRunBackend


def test_unknown_backend_is_one_clear_line() -> None:
    with pytest.raises(ConfigError, match=r"^--backend: unknown backend 'pbs' \(one of: "
                                          r"dry-run, slurm, kubernetes\)$"):
        make_backend("pbs")
    with pytest.raises(ConfigError, match="unknown option"):
        make_backend("dry-run", slurm_config="/etc/slurm.conf")


def test_a_declared_capability_the_backend_lacks_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    lying = Backend("recording", "minutiae.schedulers.recording:RecordingBackend",
                    frozenset({BulkStates}), serve=False)
    monkeypatch.setitem(BACKENDS, "recording", lying)
    with pytest.raises(BackendError, match="declared but missing BulkStates"):
        make_backend("recording")


def test_made_backends_are_the_registered_classes() -> None:
    assert isinstance(make_backend("dry-run"), DryRunBackend)
    be = make_backend("slurm", slurm_conf="/nonexistent/slurm.conf")  # nothing is run yet
    assert be.name == "slurm" and type(be).__name__ == "SlurmBackend"


def test_undo_hints() -> None:
    assert undo_hint("slurm", "drain", "gpu001") == "scontrol update NodeName=gpu001 State=RESUME"
    assert undo_hint("slurm", "resume", "gpu001", "minutiae: xid 79") == (
        "scontrol update NodeName=gpu001 State=DRAIN 'Reason=minutiae: xid 79'")
    assert undo_hint("slurm", "resume", "gpu001") == (
        "scontrol update NodeName=gpu001 State=DRAIN 'Reason=minutiae[default/controller]: manual'")
    # Kubernetes: a full undo (uncordon alone leaves our taint and annotations)
    assert undo_hint("kubernetes", "drain", "gpu001") == (
        "kubectl uncordon gpu001 && kubectl taint node gpu001 minutiae.io/unhealthy:NoSchedule- "
        "&& kubectl annotate node gpu001 minutiae.io/cordoned-by- minutiae.io/reason- "
        "minutiae.io/since-")
    assert undo_hint("kubernetes", "resume", "gpu001") == "kubectl cordon gpu001"
    assert undo_hint("kubernetes", "resume", "gpu001", "minutiae[c/x]: xid 79") == (
        "kubectl cordon gpu001 && kubectl taint node gpu001 --overwrite "
        "minutiae.io/unhealthy=true:NoSchedule && kubectl annotate node gpu001 --overwrite "
        "minutiae.io/cordoned-by=c/x 'minutiae.io/reason=minutiae[c/x]: xid 79'")
    for name in ("dry-run", "recording", "pbs"):
        assert undo_hint(name, "drain", "gpu001") == schedulers.NOTHING_TO_UNDO
        assert undo_hint(name, "resume", "gpu001") == (
            "nothing to undo: dry-run, the scheduler was not touched")
