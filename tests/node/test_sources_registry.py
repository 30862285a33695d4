"""The node-source registry: one entry per source, the seam they all meet, and the one option
table `check`, `agent` and the agent daemon are built from."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from minutiae.errors import ConfigError
from minutiae.node.config import OPTIONS, CheckConfig, config_from_options, option_defaults
from minutiae.node.sources.base import NodeSource
from minutiae.node.sources.registry import GROUPS, REGISTRY, by_name
from minutiae.rules.counters.load import counter_rules


def test_every_entry_meets_the_seam_and_has_a_unique_name() -> None:
    assert all(isinstance(s, NodeSource) for s in REGISTRY)
    names = [s.name for s in REGISTRY]
    assert len(names) == len(set(names))
    assert by_name("nvml").group == "gpu"
    with pytest.raises(KeyError):
        by_name("nope")


def test_groups_come_from_the_registry_in_display_order() -> None:
    assert GROUPS == ("gpu", "ib", "pcie", "kernel_log", "kernel")
    assert CheckConfig().checks == GROUPS


def test_every_counter_rule_component_is_delivered_by_a_source() -> None:
    """A counter rule's component is free text in TOML; this is where a typo is caught."""
    delivered = {c for s in REGISTRY for c in s.components}
    assert {r.component for r in counter_rules()} <= delivered


def test_options_are_unique_and_known_to_both_commands() -> None:
    flags = [o.flag for _, o in OPTIONS]
    assert len(flags) == len(set(flags))
    assert "kmsg" in option_defaults("agent") and "year" not in option_defaults("agent")
    assert "year" in option_defaults("check") and "ibstat" in option_defaults("check")


def test_check_defaults_check_this_machine_and_captures_skip_its_kernel_log(tmp_path: Path) -> None:
    assert config_from_options({}, "check") == CheckConfig()
    cfg = config_from_options({"nvidia_smi_xml": tmp_path / "x.xml"}, "check")
    assert (cfg.nvidia_smi_xml, cfg.kmsg) == (tmp_path / "x.xml", None)
    cfg = config_from_options({"sysfs_root": tmp_path, "kmsg": tmp_path / "k"}, "check")
    assert cfg.kmsg == tmp_path / "k"
    assert config_from_options({"no_nvml": True, "checks": "ib,gpu"}, "check").checks == ("gpu", "ib")
    assert config_from_options({"no_nvml": True}, "check").use_nvml is False


def test_agent_defaults_and_empty_kmsg(tmp_path: Path) -> None:
    cfg = config_from_options(option_defaults("agent"), "agent")
    assert (cfg.sysfs_root, cfg.kmsg, cfg.checks, cfg.use_nvml) == (Path("/sys"), Path("/dev/kmsg"), GROUPS, True)
    assert config_from_options({"kmsg": ""}, "agent").kmsg is None  # '' skips the kernel log
    assert config_from_options({"nvidia_smi_xml": ""}, "agent").nvidia_smi_xml is None
    with pytest.raises(ConfigError, match="unknown gpus"):
        config_from_options({"checks": "gpus"}, "agent")


def test_a_source_without_a_config_field_gets_its_options_keyed_by_its_name() -> None:
    cfg = CheckConfig(options={"nvme": {"nvme_root": "/x"}})
    assert cfg.option("nvme", "nvme_root") == "/x"
    assert cfg.option("nvme", "other", 5) == 5
    assert cfg.option("kmsg", "kmsg") == Path("/dev/kmsg")  # a field


def test_both_commands_take_the_table_options() -> None:
    from minutiae.cli.agent import command as agent
    from minutiae.cli.check import command as check

    def flags(cmd: click.Command) -> set[str]:
        return {f for p in cmd.params for f in p.opts}

    assert {o.flag for _, o in OPTIONS if o.check is not None} <= flags(check)
    assert {o.flag for _, o in OPTIONS if o.agent is not None} <= flags(agent)
    assert "--ibstat" not in flags(agent)
