"""``$MINUTIAE_HEADER_TIMEOUT_S`` is checked: a value that is not seconds in (0, 3600] is a
ConfigError naming the variable (exit 3 from serve). On main ``float()`` of it raised ValueError
(a traceback) and NaN, 0 or a negative value went to the header deadline unchecked."""

from __future__ import annotations

import pytest

pytest.importorskip("httptools")   # without it uvicorn's h11 runs and the variable is unused

from minutiae.controller.run import HEADER_TIMEOUT_S, http_limits  # noqa: E402
from minutiae.errors import ConfigError  # noqa: E402


@pytest.mark.parametrize("value", ["", "ten", "nan", "inf", "0", "-1", "1e309", "a\nb"])
def test_a_bad_header_timeout_is_a_config_error(value: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MINUTIAE_HEADER_TIMEOUT_S", value)
    with pytest.raises(ConfigError, match="MINUTIAE_HEADER_TIMEOUT_S"):
        http_limits()


@pytest.mark.parametrize(("value", "seconds"), [(None, HEADER_TIMEOUT_S), ("2.5", 2.5)])
def test_a_good_header_timeout_is_used(value: str | None, seconds: float,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from minutiae.controller import run

    got: list[float] = []
    monkeypatch.setattr(run, "guarded_protocol", lambda t: got.append(t) or "proto")
    if value is None:
        monkeypatch.delenv("MINUTIAE_HEADER_TIMEOUT_S", raising=False)
    else:
        monkeypatch.setenv("MINUTIAE_HEADER_TIMEOUT_S", value)
    assert http_limits()["http"] == "proto" and got == [seconds]
