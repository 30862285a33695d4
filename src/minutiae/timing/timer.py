"""StepTimer: per-rank step and section timings from inside a training job.

Standard library only (torch optional). Usage::

    timer = StepTimer("timings/rank{rank}.csv")          # or url="http://agent:9400/timings"
    for step, batch in enumerate(loader):
        with timer.step(step):
            with timer.section("forward"):
                loss = model(batch)
            with timer.section("backward"):
                loss.backward()
            with timer.section("allreduce"):              # collective: its wait is separated
                sync_gradients()
            with timer.section("optimizer"):
                opt.step()
    timer.close()

``begin(name)``/``end(name)`` and ``start_step(n)``/``end_step()`` do the same for callback
APIs (``minutiae.timing.lightning.StepTimerCallback`` for PyTorch Lightning); ``pause()``/
``resume()`` keep a validation loop out of the open step. A section entered several times in a
step (micro-batches, several all-reduces) gives one row: the summed seconds and ``calls``, the
number of times it ran. An ``end`` without its ``begin`` is ignored and counted
(``timer.unmatched``), never turned into a time since boot. Rows are buffered and written every
``flush_steps`` steps.

With ``cuda=True`` (and torch with CUDA present) sections are timed with CUDA events recorded on
the current stream, so asynchronous kernels are attributed to the section that launched them;
an event pair is resolved only once ``query()`` says it completed, never by synchronising, so
the timer never stalls the step. Host-side step totals still use the monotonic clock.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from minutiae.clock import Clock, SystemClock
from minutiae.timing.sinks import CsvSink, HttpSink, Identity, Row, Sink

_RANK_VARS = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK")
_LOCAL_VARS = ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")


def _env_int(names: tuple[str, ...]) -> int | None:
    for n in names:
        v = os.environ.get(n, "").strip()
        if v.isdigit():
            return int(v)
    return None


class _Section:
    """A named section: entered and left any number of times in a step; the step's row holds
    the summed time and how many times it ran (micro-batches, several all-reduces)."""

    __slots__ = ("_mono", "_t0", "_timer", "calls", "name", "total")

    def __init__(self, timer: StepTimer, name: str) -> None:
        self._timer, self.name, self._t0, self._mono = timer, name, -1.0, timer._mono
        self.total, self.calls = 0.0, 0

    def __enter__(self) -> _Section:
        self._t0 = self._mono()
        return self

    def __exit__(self, *exc: object) -> None:
        t0 = self._t0
        if t0 < 0.0:  # an end without a begin: never a time since boot
            self._timer.unmatched += 1
            return
        self.total += self._mono() - t0
        self._t0 = -1.0
        self.calls += 1
        if self.calls == 1:
            self._timer._used.append(self)


class _CudaSection:
    __slots__ = ("_end", "_start", "_timer", "name")

    def __init__(self, timer: StepTimer, name: str) -> None:
        self._timer, self.name = timer, name
        self._start: Any = None
        self._end: Any = None

    def __enter__(self) -> _CudaSection:
        make = self._timer._event
        assert make is not None
        self._start = make()
        self._start.record()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._start is None:
            self._timer.unmatched += 1
            return
        make = self._timer._event
        assert make is not None
        end = make()
        end.record()
        self._timer._pending.append((self._timer._step_no, self.name, self._start, end))
        self._start = None


class _Step:
    __slots__ = ("_mono", "_paused", "_t0", "_timer")

    def __init__(self, timer: StepTimer) -> None:
        self._timer, self._t0, self._mono, self._paused = timer, -1.0, timer._mono, -1.0

    def __enter__(self) -> _Step:
        self._t0 = self._mono()
        return self

    def __exit__(self, *exc: object) -> None:
        t = self._timer
        if self._t0 < 0.0:
            t.unmatched += 1
            return
        if self._paused >= 0.0:
            t.resume()
        t._emit_sections()
        t._buf.append((t._step_no, "", self._mono() - self._t0, t._now(), 0))
        self._t0 = -1.0
        t._steps += 1
        if t._pending:
            t._resolve()
        if t._steps >= t.flush_steps:
            t.flush()


class StepTimer:
    """Times steps and named sections of one rank; see the module docstring."""

    def __init__(self, path: str | Path | None = None, *, url: str | None = None,
                 rank: int | None = None, node: str | None = None, gpu: int | None = None,
                 stage: int | str | None = None, flush_steps: int = 50, cuda: bool = False,
                 clock: Clock | None = None, sink: Sink | None = None,
                 event_factory: Callable[[], Any] | None = None) -> None:
        # The timer is a measuring instrument: with the real clock it reads time.perf_counter and
        # time.time directly (a SystemClock method call adds ~0.4 us per read); tests inject one.
        if clock is None or isinstance(clock, SystemClock):
            self._mono: Callable[[], float] = time.perf_counter
            self._now: Callable[[], float] = time.time
        else:
            self._mono, self._now = clock.monotonic, clock.now
        rank = rank if rank is not None else (_env_int(_RANK_VARS) or 0)
        gpu = gpu if gpu is not None else _env_int(_LOCAL_VARS)
        who = Identity(rank, node or socket.gethostname(), gpu, stage)
        if sink is None:
            if (path is None) == (url is None):
                raise ValueError("StepTimer needs exactly one of path= or url=")
            sink = (CsvSink(str(path).format(rank=rank, node=who.node), who) if path is not None
                    else HttpSink(str(url), who))
        self.sink = sink
        self.rank = rank
        self.flush_steps = max(1, flush_steps)
        self._buf: list[Row] = []
        self._used: list[_Section] = []
        #: ends (of sections or steps) that had no begin: ignored, counted here
        self.unmatched = 0
        #: steps still open at close (not written)
        self.unfinished = 0
        self._pending: list[tuple[int, str, Any, Any]] = []
        self._steps = 0
        self._step_no = 0
        self._step_ctx = _Step(self)
        self._open_sections: dict[str, Any] = {}
        self._event: Callable[[], Any] | None = event_factory or (
            _cuda_event_factory() if cuda else None)
        section_type: type[_Section] | type[_CudaSection] = (
            _CudaSection if self._event is not None else _Section)
        self._section_type = section_type
        self._sections: dict[str, _Section | _CudaSection] = {}

    # -- context-manager API -----------------------------------------------------------------
    def step(self, step: int) -> _Step:
        self._step_no = step
        return self._step_ctx

    def section(self, name: str) -> _Section | _CudaSection:
        s = self._sections.get(name)
        if s is None:
            s = self._sections[name] = self._section_type(self, name)
        return s

    # -- callback API (Lightning hooks) ------------------------------------------------------
    def start_step(self, step: int) -> None:
        self.step(step).__enter__()

    def end_step(self) -> None:
        self._step_ctx.__exit__(None, None, None)

    def begin(self, name: str) -> None:
        self.section(name).__enter__()

    def end(self, name: str) -> None:
        self.section(name).__exit__(None, None, None)

    @property
    def in_step(self) -> bool:
        """A step is open (started and not ended)."""
        return self._step_ctx._t0 >= 0.0

    def pause(self) -> None:
        """Stop the open step's clock (validation inside a step is not step time)."""
        st = self._step_ctx
        if st._t0 >= 0.0 and st._paused < 0.0:
            st._paused = self._mono()

    def resume(self) -> None:
        st = self._step_ctx
        if st._paused >= 0.0:
            st._t0 += self._mono() - st._paused
            st._paused = -1.0

    def _emit_sections(self) -> None:
        """One row per section used in the step: summed seconds and the number of calls."""
        step = self._step_no
        for sec in self._used:
            self._buf.append((step, sec.name, sec.total, 0.0, sec.calls))
            sec.total, sec.calls = 0.0, 0
        self._used.clear()

    # -- output ------------------------------------------------------------------------------
    def _resolve(self) -> None:
        """Completed CUDA event pairs, summed per (step, section) once all of that step's pairs
        of the section completed (never by synchronising)."""
        waiting = {(step, name) for step, name, _, end in self._pending if not end.query()}
        keep = []
        sums: dict[tuple[int, str], list[float]] = {}
        for step, name, start, end in self._pending:
            if (step, name) in waiting:
                keep.append((step, name, start, end))
                continue
            acc = sums.setdefault((step, name), [0.0, 0.0])
            acc[0] += start.elapsed_time(end) / 1000.0
            acc[1] += 1
        for (step, name), (secs, calls) in sums.items():
            self._buf.append((step, name, secs, 0.0, int(calls)))
        self._pending = keep

    def flush(self) -> None:
        if self._buf:
            rows, self._buf = self._buf, []
            self.sink.write(rows)
        self._steps = 0

    def close(self) -> None:
        if self.in_step:  # a step cut short (exception, interrupted run): not a step time
            for sec in self._used:
                sec.total, sec.calls = 0.0, 0
            self._used.clear()
            self.unfinished += 1
        elif self._used:
            self._emit_sections()
        if self._pending:
            for _, _, _, end in self._pending:
                end.synchronize()
            self._resolve()
        self.flush()
        self.sink.close()

    def __enter__(self) -> StepTimer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _cuda_event_factory() -> Callable[[], Any] | None:
    try:
        import torch  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return lambda: torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call, unused-ignore]
