"""Streaming straggler detection for a live job (``minutiae stragglers --follow``).

Rows arrive in any order within a step. A step is tested once rows of a step ``lag`` later have
been seen (ranks of a synchronous job cannot be more than one step apart, so ``lag=1`` is
enough); rows that arrive for a step already tested are counted and reported, never mixed in.
The first ``warmup`` steps calibrate (peer groups, noise, thresholds); every later step costs
the incremental update of ``StragglerAnalysis`` only - never a rerun over the history.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import polars as pl

from minutiae.analyses.stragglers.analysis import Options, StragglerAnalysis
from minutiae.analyses.stragglers.prep import prepare, prepare_steps
from minutiae.analyses.stragglers.types import Basis, StragglerReport, Suspect
from minutiae.errors import DataError


class StragglerStream:
    def __init__(self, options: Options | None = None, where: str = "",
                 leaf_of: Mapping[str, str] | None = None, lag: int = 1) -> None:
        self.options = options or Options()
        self.where, self.leaf_of, self.lag = where, leaf_of, lag
        self.analysis: StragglerAnalysis | None = None
        self.ranks: np.ndarray | None = None
        self.buffer: list[pl.DataFrame] = []
        self.max_step = -1
        self.done_step = -1
        self.late_rows = 0
        self.seen: set[str] = set()
        self.sections = False

    def feed(self, df: pl.DataFrame, final: bool = False) -> list[Suspect]:
        """Add rows; test every step now complete; return suspects not reported before."""
        if df.height:
            df = df.rename({c: c.strip().lower() for c in df.columns})
            if "step" not in df.columns:
                raise DataError("missing column step; need at least step,rank,seconds",
                                self.where or None)
            df = df.with_columns(pl.col("step").cast(pl.Int64, strict=False))
            top = df["step"].max()
            if isinstance(top, int):
                self.max_step = max(self.max_step, top)
            self.buffer.append(df)
        if not self.buffer:
            return []
        cutoff = self.max_step if final else self.max_step - self.lag
        buf = pl.concat(self.buffer, how="diagonal_relaxed") if len(self.buffer) > 1 else self.buffer[0]
        ready = buf.filter(pl.col("step") <= cutoff)
        rest = buf.filter((pl.col("step") > cutoff) | pl.col("step").is_null())
        late = ready.filter(pl.col("step") <= self.done_step)
        if late.height:
            self.late_rows += late.height
            ready = ready.filter(pl.col("step") > self.done_step)
        if ready.height == 0:
            self.buffer = [rest] if rest.height else []
            return []
        if self.analysis is None:
            if ready["step"].n_unique() < self.options.warmup and not final:
                return []  # keep buffering until the warm-up window is complete
            m = prepare(ready, self.where, self.leaf_of)
            self.analysis = StragglerAnalysis(m.slice(0, self.options.warmup), self.options,
                                              self.where)
            self.ranks = m.ranks
            self.sections = m.basis is not Basis.STEP
        else:
            assert self.ranks is not None
            fast = prepare_steps(ready, self.where, self.ranks) if not self.sections else None
            m = fast if fast is not None else prepare(ready, self.where, self.leaf_of,
                                                      ranks=self.ranks)
        fresh = self.analysis.update(m)
        top = ready["step"].max()
        if isinstance(top, int):
            self.done_step = max(self.done_step, top)
        self.buffer = [rest] if rest.height else []
        if not fresh:
            return []
        new = [s for s in self.analysis.report().suspects if s.component not in self.seen]
        self.seen.update(s.component for s in new)
        return new

    def report(self) -> StragglerReport | None:
        if self.analysis is None:
            return None
        if self.late_rows:
            note = f"{self.late_rows} row(s) arrived after their step was tested and were skipped"
            if note not in self.analysis.warnings:
                self.analysis.warnings.append(note)
        return self.analysis.report()
