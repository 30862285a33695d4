"""minutiae.node: one node's health — the check ``minutiae check`` and the agent run, over the
registered node sources (README in ``sources/``: how to add one).

The public surface (``__all__`` is pinned by tests/node/test_node_exports.py)."""

from minutiae.node.check import NodeReport, read_sources, run_check
from minutiae.node.config import (
    OPTIONS,
    CheckConfig,
    click_options,
    config_from_options,
    option_defaults,
    parse_checks,
)
from minutiae.node.memory import CheckMemory
from minutiae.node.result import reason_for, status_of, unknown
from minutiae.node.sources.base import Kind, NodeSource, Option, Reading, Request, Source
from minutiae.node.sources.registry import GROUPS, REGISTRY, by_name

__all__ = [
    "GROUPS",
    "OPTIONS",
    "REGISTRY",
    "CheckConfig",
    "CheckMemory",
    "Kind",
    "NodeReport",
    "NodeSource",
    "Option",
    "Reading",
    "Request",
    "Source",
    "by_name",
    "click_options",
    "config_from_options",
    "option_defaults",
    "parse_checks",
    "read_sources",
    "reason_for",
    "run_check",
    "status_of",
    "unknown",
]
