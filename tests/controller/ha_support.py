"""PostgreSQL for the HA tests: the real server of scripts/services/postgres-up.sh
(MINUTIAE_PG_DSN); each test gets a schema of its own so tests never see each other's rows."""

from __future__ import annotations

import os
import uuid
from urllib.parse import quote

import pytest


def pg_dsn() -> str:
    dsn = os.environ.get("MINUTIAE_PG_DSN")
    if dsn:
        return dsn
    msg = "PostgreSQL not running: MINUTIAE_PG_DSN unset (start it with `make services`)"
    if os.environ.get("MINUTIAE_REQUIRE_SERVICES") == "1":
        pytest.fail(msg)
    pytest.skip(msg)


def fresh_schema_dsn() -> str:
    """A DSN whose search_path is a new, empty schema."""
    import psycopg

    base = pg_dsn()
    name = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(base, autocommit=True) as c:
        c.execute(f"CREATE SCHEMA {name}")
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}options={quote(f'-csearch_path={name}')}"
