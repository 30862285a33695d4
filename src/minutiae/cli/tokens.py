"""Reading the shared bearer token (file or $MINUTIAE_TOKEN) for agent, serve and fleet CLIs."""

from __future__ import annotations

import os
from pathlib import Path

from minutiae.errors import ConfigError


def read_only_token(token_file: str | None = None) -> str:
    """A token for the read views (``nodes``, ``explain``, ``audit``): ``--read-token-file``,
    else ``$MINUTIAE_READ_TOKEN``, else the admin token (``$MINUTIAE_TOKEN``), else none."""
    if token_file:
        return read_token(token_file)
    return os.environ.get("MINUTIAE_READ_TOKEN", "").strip() or read_token(None, required=False)


def read_token(token_file: str | None, required: bool = True) -> str:
    if token_file:
        try:
            tok = Path(token_file).read_text("utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{token_file}: cannot read token: {exc}") from None
        if not tok:
            raise ConfigError(f"{token_file}: token file is empty")
        return tok
    tok = os.environ.get("MINUTIAE_TOKEN", "").strip()
    if not tok and required:
        raise ConfigError("no token: pass --token-file FILE or set MINUTIAE_TOKEN")
    return tok
