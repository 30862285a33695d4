from datetime import UTC, datetime

import pytest

from minutiae.errors import ValidationError
from minutiae.model import Action, Finding, Severity, Status
from minutiae.schedulers.base import make_reason, validate_node


def test_orders_follow_design() -> None:
    assert Severity.INFO < Severity.WARNING < Severity.ERROR < Severity.CRITICAL
    assert Action.NONE < Action.RESTART_APP < Action.RESET_GPU < Action.REBOOT < Action.INSPECT
    assert not Action.RESTART_APP.drains and Action.RESET_GPU.drains
    assert [s.value for s in Status] == [0, 1, 2, 3]


def test_worst_status_unknown_is_not_ok() -> None:
    assert Status.worst([Status.OK, Status.UNKNOWN]) is Status.UNKNOWN
    assert Status.worst([Status.WARNING, Status.UNKNOWN]) is Status.UNKNOWN
    assert Status.worst([Status.UNKNOWN, Status.CRITICAL]) is Status.CRITICAL
    assert Status.worst([]) is Status.OK


def test_finding_json_fields() -> None:
    f = Finding("xid", Severity.CRITICAL, Action.RESET_GPU, "fell off bus", code=79,
                pci="0000:44:00.0", line="NVRM: Xid ...", time=datetime(2024, 1, 1, tzinfo=UTC))
    j = f.to_json()
    assert {k: j[k] for k in ("kind", "code", "pci", "severity", "action")} == {
        "kind": "xid", "code": 79, "pci": "0000:44:00.0", "severity": "critical", "action": "reset_gpu"}
    assert Severity.parse("Critical") is Severity.CRITICAL
    with pytest.raises(ValueError):
        Action.parse("explode")


@pytest.mark.parametrize("bad", ["", "gpu1;rm -rf /", "-gpu1", "a b", "x" * 80, "gpu$(id)"])
def test_node_names_validated(bad: str) -> None:
    with pytest.raises(ValidationError):
        validate_node(bad)


def test_reason_is_prefixed_sanitised_and_capped() -> None:
    assert make_reason("xid 79 gpu 0000:44:00 fell off bus") == "minutiae: xid 79 gpu 0000:44:00 fell off bus"
    r = make_reason("a; $(reboot) `x`\n" + "y" * 500)
    assert r.startswith("minutiae: ") and len(r) <= 200
    assert not any(c in r for c in ";$`\n")
    assert make_reason("minutiae: already") == "minutiae: already"
