"""Writes the demo report directory."""

from __future__ import annotations

from pathlib import Path

from minutiae.errors import InputError
from minutiae.sim.eval.evaluate import Evaluation
from minutiae.sim.eval.report import render_html


def write_report(ev: Evaluation, report_dir: Path) -> Path:
    try:
        report_dir.mkdir(parents=True, exist_ok=True)
        path = report_dir / "index.html"
        path.write_text(render_html(ev), encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write the report: {exc}", str(report_dir)) from None
    return path
