"""Reads dcgm-exporter's Prometheus text from a URL (httpx) or a captured file."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from minutiae.errors import SourceUnavailable
from minutiae.inputs import read_text
from minutiae.model.snapshot import Snapshot
from minutiae.node.sources.dcgm.parse import SOURCE, parse_dcgm

if TYPE_CHECKING:
    import httpx

MAX_BYTES = 32 * 1024 * 1024


def read_dcgm(where: str, timeout_s: float = 5.0, client: httpx.Client | None = None) -> Snapshot:
    """``where`` is ``http(s)://host:9400/metrics`` or a file path. An unreachable exporter raises
    ``SourceUnavailable``; an unreadable file ``InputError``; a page that is not dcgm-exporter
    text ``ParseError`` (all naming ``where``)."""
    if where.startswith(("http://", "https://")):
        import httpx  # lazily: httpx pulls in rich; the node check must stay light

        try:
            if client is not None:
                resp = client.get(where, timeout=timeout_s)
            else:
                with httpx.Client(timeout=timeout_s) as c:
                    resp = c.get(where)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:   # InvalidURL: a newline in it
            raise SourceUnavailable(SOURCE, f"{where!r}: {exc.__class__.__name__}: {exc}") from None
        if resp.status_code != 200:
            raise SourceUnavailable(SOURCE, f"{where}: HTTP {resp.status_code}")
        return parse_dcgm(resp.text[:MAX_BYTES], where)
    # the one bounded reader: binary data (/dev/zero) is refused from its first block, a file over
    # the limit from its size, an endless stream at the limit
    return parse_dcgm(read_text(Path(where), limit=MAX_BYTES, what="dcgm-exporter page"), where)
