"""What kind of timing file a file's first bytes are (pure, no dataframe library: the fast
paths of ``ingest`` decide before polars is imported)."""

from __future__ import annotations

__all__ = ["PARQUET_MAGIC", "looks_like_csv"]

PARQUET_MAGIC = b"PAR1"


def looks_like_csv(data: bytes) -> bool:
    """The first non-empty line is a header naming step and rank (comma-separated)."""
    for raw in data[:65536].split(b"\n"):
        if raw.strip():
            names = {c.strip().strip('"').lower() for c in raw.decode(
                "utf-8", errors="replace").split(",")}
            return "step" in names and "rank" in names
    return False
