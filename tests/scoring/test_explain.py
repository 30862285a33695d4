"""Which finding kinds explain which truth classes is data (``explained_by`` per class in the
fault profile), validated when it is loaded, and it is what the scorer matches alarms with."""

from __future__ import annotations

import pytest

from minutiae.errors import ConfigError, DataError
from minutiae.model import Severity
from minutiae.scoring.explain import Explains, build_explains, default_explains
from minutiae.scoring.score import Detection, score
from minutiae.scoring.truth import TruthEvent

T0 = 1_736_121_600.0


def test_a_kinds_own_class_comes_first_then_the_others_in_profile_order() -> None:
    ex = build_explains({"persistent_straggler": ["straggler"], "thermal_throttle": ["throttle"],
                         "fail_slow": []},
                        {"thermal_throttle": ["straggler"], "fail_slow": ["straggler"]}, "p.toml")
    assert ex.of("straggler", "straggler") == ("persistent_straggler", "thermal_throttle", "fail_slow")
    assert ex.of("throttle", "throttle") == ("thermal_throttle",)
    assert ex.of("xid:79", "xid") == ()


def test_a_listed_code_wins_over_its_bare_kind() -> None:
    ex = build_explains({"gpu_off_bus": ["xid:79"], "app_xid": ["xid"]}, {}, "p.toml")
    assert ex.of("xid:79", "xid") == ("gpu_off_bus",)
    assert ex.of("xid:13", "xid") == ("app_xid",)


@pytest.mark.parametrize("by, also, match", [
    ({"a": ["k"], "b": ["k"]}, {}, "already in the explained_by of 'a'"),
    ({"a": ["k"]}, {"b": ["nope"]}, "in no class's explained_by"),
    ({"a": ["k"]}, {"a": ["k"]}, "both explained_by and also_explained_by"),
    ({"a": ["Xid 79"]}, {}, "not a finding kind"),
    ({"a": ["xid:seven"]}, {}, "not a finding kind"),
    ({"a": ["k", "k"]}, {}, "lists a kind twice"),
    ({"a": "k"}, {}, "must be a list"),
])
def test_bad_explanations_are_refused_naming_the_file_and_class(by: dict[str, object],
                                                                also: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match) as exc:
        build_explains(by, also, "p.toml")
    assert "p.toml" in str(exc.value)


def test_the_map_survives_meta_json_and_garbage_there_is_a_data_error() -> None:
    ex = default_explains()
    assert Explains.from_json(ex.to_json(), "meta.json") == ex
    for bad in ([], {"xid:79": []}, {"xid:79": "gpu_off_bus"}, {"Xid 79": ["gpu_off_bus"]}):
        with pytest.raises(DataError, match="meta.json"):
            Explains.from_json(bad, "meta.json")


def test_the_default_profile_explains_what_the_scorer_always_matched() -> None:
    ex = default_explains()
    assert ex.of("xid:79", "xid") == ("gpu_off_bus",)
    assert ex.of("xid:140", "xid") == ("gpu_uncontained", "gpu_dbe")
    assert ex.of("ib_link_downed", "ib_link_downed")[0] == "ib_link_flap"
    assert ex.of("nic_error", "nic_error") == ("boot_settle", "planned_reboot")
    assert ex.of("regression", "regression") == ("perf_regression",)


def test_the_scorer_matches_by_the_explanations_it_is_given() -> None:
    truth = [TruthEvent("f1", "gpu_off_bus", "n1", "gpu:0", T0, T0 + 3600, "critical", True, ("kern.log",)),
             TruthEvent("b1", "app_xid", "n1", "gpu:0", T0, T0 + 60, "warning", False, ("kern.log",), False)]
    alarm = [Detection("d", "n1", T0 + 10, "xid", Severity.CRITICAL, True, 79)]
    default = score(truth, alarm, 1.0)
    assert default.cls("gpu_off_bus").detected == 1 and default.false_alarms == 0
    # a profile in which Xid 79 explains only application faults: the same alarm is false
    other = build_explains({"gpu_off_bus": [], "app_xid": ["xid:79"]}, {}, "p.toml")
    card = score(truth, alarm, 1.0, explains=other)
    assert card.cls("gpu_off_bus").detected == 0
    assert card.false_alarms == 1 and card.false_alarm_causes == {"app_xid": 1}
