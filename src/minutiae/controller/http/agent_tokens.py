"""Per-node agent tokens: a token scoped to one node name may post reports for that node only
(another node's report: 403); the admin token may post any. The file (``serve
--agent-tokens FILE``) has one line per token, ``<node> sha256:<hex of the token>`` (or the
token itself, ``<node> <token>``); ``#`` comments. Rotation: add the new token's line beside
the old one (both work), move the agent to the new token, remove the old line. The file is
re-read when its modification time changes (checked at most once a second).
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
import time
from pathlib import Path

from minutiae.errors import ConfigError, InputError
from minutiae.inputs import read_text
from minutiae.schedulers.base import validate_node

_HEX = re.compile(r"^sha256:([0-9a-f]{64})$")
#: one line per node: 16 MiB is over 150,000 nodes (and bounds /dev/zero given by mistake)
MAX_FILE = 16 << 20


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def parse_agent_tokens(text: str, where: str) -> dict[str, str]:
    """``sha256 hex → node`` from the file's text; a bad line is a ``ConfigError`` naming it."""
    out: dict[str, str] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 2:
            raise ConfigError(f"{where}:{n}: expected '<node> sha256:<hex>' or '<node> <token>'")
        node, tok = parts
        try:
            validate_node(node)
        except Exception:
            raise ConfigError(f"{where}:{n}: invalid node name {node!r}") from None
        m = _HEX.fullmatch(tok)
        if m is None and len(tok) < 16:
            raise ConfigError(f"{where}:{n}: token for {node} under 16 characters")
        out[m.group(1) if m else token_hash(tok)] = node
    return out


class AgentTokens:
    """The node a presented bearer token is scoped to (None: not an agent token)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._mtime = -1.0
        self._checked = 0.0
        self._by_hash: dict[str, str] = {}
        self._reload(force=True)

    def _reload(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._checked < 1.0:
            return
        self._checked = now
        try:
            mtime = os.stat(self.path).st_mtime
            if not force and mtime == self._mtime:
                return
            text = read_text(self.path, limit=MAX_FILE, what="file of agent tokens")
        except (OSError, InputError) as exc:
            if force:
                why = str(exc).removeprefix(f"{self.path}: ")
                raise ConfigError(f"{self.path}: cannot read agent tokens: {why}") from None
            return  # keep the last good set
        try:
            table = parse_agent_tokens(text, str(self.path))
        except ConfigError:
            if force:
                raise
            return  # a half-edited file: keep the last good set
        with self._lock:
            self._by_hash, self._mtime = table, mtime

    def node_for(self, authorization: bytes) -> str | None:
        if not authorization.startswith(b"Bearer "):
            return None
        self._reload()
        digest = hashlib.sha256(authorization[7:].strip()).hexdigest()
        with self._lock:
            return self._by_hash.get(digest)
