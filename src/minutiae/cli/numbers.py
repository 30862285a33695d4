"""Click types for numeric options that reach arithmetic, ``time.sleep`` or a random generator:
click's ``FloatRange`` lets NaN through (it compares false with every bound) and ``inf``
through an open upper end, so ``--poll nan`` or ``--rate-scale 1e309`` escaped as a traceback
or a loop that never ends (issue 16). A bad value here is click's usage error (exit 2)."""

from __future__ import annotations

import math
from typing import Any

import click

__all__ = ["Finite"]


class Finite(click.FloatRange):
    """A ``FloatRange`` that refuses NaN and the infinities."""

    name = "finite float range"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return rv
