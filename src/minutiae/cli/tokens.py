"""Reading the shared bearer token (file or $MINUTIAE_TOKEN) for agent, serve and fleet CLIs."""

from __future__ import annotations

import os
import re
from pathlib import Path

from minutiae.errors import ConfigError, InputError
from minutiae.inputs import read_text

#: a token file is one short line: anything longer is not one (/dev/zero, a log given by mistake)
MAX_TOKEN_FILE = 64 << 10
#: what an HTTP ``Authorization: Bearer`` header can carry (printable ASCII, RFC 6750)
_TOKEN = re.compile(r"[\x21-\x7e]+")


def read_only_token(token_file: str | None = None) -> str:
    """A token for the read views (``nodes``, ``explain``, ``audit``): ``--read-token-file``,
    else ``$MINUTIAE_READ_TOKEN``, else the admin token (``$MINUTIAE_TOKEN``), else none."""
    if token_file:
        return read_token(token_file)
    env = os.environ.get("MINUTIAE_READ_TOKEN", "").strip()
    return _valid(env, "$MINUTIAE_READ_TOKEN") if env else read_token(None, required=False)


def read_token(token_file: str | None, required: bool = True) -> str:
    if token_file:
        try:
            tok = read_text(Path(token_file), limit=MAX_TOKEN_FILE, what="token file")
        except InputError as exc:
            why = str(exc).removeprefix(f"{token_file}: ")
            raise ConfigError(f"{token_file}: cannot read token: {why}") from None
        tok = tok.lstrip("\ufeff").strip()
        if not tok:
            raise ConfigError(f"{token_file}: token file is empty")
        return _valid(tok, token_file)
    tok = os.environ.get("MINUTIAE_TOKEN", "").strip()
    if not tok and required:
        raise ConfigError("no token: pass --token-file FILE or set MINUTIAE_TOKEN")
    return _valid(tok, "$MINUTIAE_TOKEN") if tok else tok


def _valid(tok: str, where: str) -> str:
    """``tok``, or ConfigError when it cannot go in an HTTP header (a space, a second line, a
    non-ASCII character: httpx raised UnicodeEncodeError, a traceback)."""
    if not _TOKEN.fullmatch(tok):
        raise ConfigError(f"{where}: a token is one word of printable ASCII characters")
    return tok
