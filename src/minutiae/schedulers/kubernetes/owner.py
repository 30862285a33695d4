"""Kubernetes ownership: who cordoned a Node (the ``minutiae.io/cordoned-by`` annotation) and
the ``kubectl`` lines that fully undo a drain or a resume (cordon, taint and annotations).

``cordoned-by`` holds the owner tag (``<cluster>/<controller>`` or ``hcp``); the value
``minutiae`` was written before owner tags and reads as ``legacy`` (see ``schedulers.base.owns``).
"""

from __future__ import annotations

import shlex
from typing import Any

from minutiae.schedulers.base import LEGACY_OWNER, UndoVerb, reason_owner

DOMAIN = "minutiae.io"
TAINT_KEY = f"{DOMAIN}/unhealthy"
OWNER_KEY = f"{DOMAIN}/cordoned-by"
#: what ``cordoned-by`` held before owner tags
LEGACY_VALUE = "minutiae"
REASON_KEY = f"{DOMAIN}/reason"
SINCE_KEY = f"{DOMAIN}/since"


def owner_of(node: dict[str, Any]) -> str | None:
    """The owner tag a Node object's annotation names (None: no minutiae cordon)."""
    value = (node.get("metadata", {}).get("annotations") or {}).get(OWNER_KEY)
    if not isinstance(value, str) or not value:
        return None
    return LEGACY_OWNER if value == LEGACY_VALUE else value


def taints(node: dict[str, Any]) -> list[dict[str, Any]]:
    return list(node.get("spec", {}).get("taints") or [])


def has_our_taint(node: dict[str, Any]) -> bool:
    return any(t.get("key") == TAINT_KEY for t in taints(node))


def undo_hint(verb: UndoVerb, node: str, reason: str = "") -> str:
    """A drain's undo: uncordon, remove our taint and our annotations (``kubectl uncordon``
    alone leaves the taint, so the node stays out). A resume's undo: cordon, taint and the
    ownership annotations back, so the drain is ours again (owner read from ``reason``)."""
    if verb == "drain":
        return " && ".join((
            shlex.join(["kubectl", "uncordon", node]),
            shlex.join(["kubectl", "taint", "node", node, f"{TAINT_KEY}:NoSchedule-"]),
            shlex.join(["kubectl", "annotate", "node", node, f"{OWNER_KEY}-", f"{REASON_KEY}-",
                        f"{SINCE_KEY}-"])))
    cmds = [shlex.join(["kubectl", "cordon", node])]
    owner = reason_owner(reason)
    if owner is not None:
        cmds.append(shlex.join(["kubectl", "taint", "node", node, "--overwrite",
                                f"{TAINT_KEY}=true:NoSchedule"]))
        cmds.append(shlex.join(["kubectl", "annotate", "node", node, "--overwrite",
                                f"{OWNER_KEY}={LEGACY_VALUE if owner == LEGACY_OWNER else owner}",
                                f"{REASON_KEY}={reason}"]))
    return " && ".join(cmds)
