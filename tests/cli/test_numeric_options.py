"""Numeric options that reach arithmetic, ``time.sleep`` or numpy's generator refuse NaN, the
infinities and values past their range as a usage error (exit 2, one message), before any work.
On main each of these escaped: ``--poll nan`` (ValueError from time.sleep), ``--poll 1e309`` and
``neighbours --interval inf`` (OverflowError), ``--false-alarms 1e309`` (StatisticsError),
``--ranks-per-node -1`` (ValueError), ``sim --days nan`` / ``--rate-scale inf`` (numpy's
'lam value too large'), ``sim --seed -1`` (ValueError); ``--rate-scale 1e19`` ran for ever."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from minutiae.cli.main import main
from minutiae.cli.numbers import Finite

SIM = ["sim", "--nodes", "2", "--days", "0.05", "--quiet", "--out", "{out}"]
CASES = [
    (["stragglers", "{csv}", "--false-alarms", "1e309"], "--false-alarms"),
    (["stragglers", "{csv}", "--false-alarms", "nan"], "--false-alarms"),
    (["stragglers", "{csv}", "--false-alarms", "12345678901234567890"], "--false-alarms"),
    (["stragglers", "{csv}", "--ranks-per-node", "-1"], "--ranks-per-node"),
    (["stragglers", "--follow", "{csv}", "--idle-exit", "0.2", "--poll", "nan"], "--poll"),
    (["stragglers", "--follow", "{csv}", "--idle-exit", "0.2", "--poll", "-1"], "--poll"),
    (["stragglers", "--follow", "{csv}", "--idle-exit", "0.2", "--poll", "1e309"], "--poll"),
    (["stragglers", "--follow", "{csv}", "--idle-exit", "nan"], "--idle-exit"),
    (["neighbours", "--job-cpus", "0", "--interval", "inf"], "--interval"),
    (["neighbours", "--job-cpus", "0", "--interval", "12345678901234567890"], "--interval"),
    (["neighbours", "--job-cpus", "0", "--interval", "0", "--min-share", "nan"], "--min-share"),
    ([*SIM[:4], "nan", *SIM[5:]], "--days"),
    ([*SIM, "--seed", "-1"], "--seed"),
    ([*SIM, "--rate-scale", "inf"], "--rate-scale"),
    ([*SIM, "--rate-scale", "12345678901234567890"], "--rate-scale"),
    ([*SIM, "--noise-scale", "nan"], "--noise-scale"),
    (["demo", "--nodes", "2", "--days", "nan", "--quiet", "--out", "{out}"], "--days"),
    (["check", "--no-nvml", "--slurm", "--slurm-timeout", "nan"], "--slurm-timeout"),
]


@pytest.mark.parametrize(("argv", "option"), CASES, ids=[f"{a[0]} {o} {a[a.index(o) + 1]}" for a, o in CASES])
def test_a_hostile_number_is_a_usage_error(argv: list[str], option: str, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    csv = tmp_path / "t.csv"
    csv.write_text("step,rank,seconds\n" + "".join(f"{s},{r},1.0\n" for s in range(30)
                                                  for r in range(4)))
    args = [a.format(csv=csv, out=tmp_path / "out") for a in argv]
    try:
        rc = main(args)
    except SystemExit as exc:   # click's own exit
        rc = exc.code if isinstance(exc.code, int) else 1
    err = capsys.readouterr().err
    assert rc == 2, (rc, err[-500:])
    assert f"Invalid value for '{option}'" in err, err
    assert not (tmp_path / "out").exists()   # refused before any work


@pytest.mark.parametrize(("text", "ok"), [("0.5", True), ("nan", False), ("inf", False),
                                          ("-inf", False), ("1e309", False), ("2", False)])
def test_finite_refuses_nan_and_infinities_and_keeps_the_range(text: str, ok: bool) -> None:
    t = Finite(0, 1)
    if ok:
        assert t.convert(text, None, None) == float(text)
    else:
        with pytest.raises(click.BadParameter):
            t.convert(text, None, None)
