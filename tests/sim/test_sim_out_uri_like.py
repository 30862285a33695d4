"""``sim --out`` a relative path that looks like a URI (``http://h``, ``s3://b``; a path may
hold a colon) is a local directory: on main pyarrow took ``http:/h/telemetry.parquet`` for a URI
and raised ArrowInvalid, a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from minutiae.cli.main import main


@pytest.mark.parametrize("out", ["http://h:1/x", "s3://bucket/x"])
def test_a_uri_like_out_is_a_local_directory(out: str, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["sim", "--nodes", "2", "--days", "0.05", "--quiet", "--out", out]) == 0
    assert (tmp_path / Path(out) / "telemetry.parquet").stat().st_size > 0
