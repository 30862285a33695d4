"""StepTimer: rows it writes, the HTTP sink (a real local server), CUDA-event seam, overhead path."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from minutiae.analyses.stragglers.analysis import analyse
from minutiae.analyses.stragglers.parse import parse_timings
from minutiae.analyses.stragglers.prep import prepare
from minutiae.analyses.stragglers.types import Basis
from minutiae.testing import fakes
from minutiae.timing import StepTimer


def _loop(timer: StepTimer, clock: fakes.FakeClock, steps: int, compute: float,
          start: int = 0) -> None:
    for step in range(start, start + steps):
        with timer.step(step):
            with timer.section("forward"):
                clock.advance(compute / 3)
            with timer.section("backward"):
                clock.advance(compute * 2 / 3)
            with timer.section("allreduce"):
                clock.advance(0.25)


def test_csv_rows_exact(tmp_path: Path) -> None:
    clock = fakes.FakeClock(start=1_767_225_600.0)
    timer = StepTimer(tmp_path / "r{rank}.csv", rank=3, node="gpu117", gpu=3, stage=1,
                      clock=clock, flush_steps=2)
    _loop(timer, clock, 3, compute=0.75)
    timer.close()
    lines = (tmp_path / "r3.csv").read_text().splitlines()
    assert lines[0] == "step,rank,seconds,node,gpu,stage,section,time,calls"
    assert lines[1:5] == ["0,3,0.25,gpu117,3,1,forward,,1", "0,3,0.5,gpu117,3,1,backward,,1",
                          "0,3,0.25,gpu117,3,1,allreduce,,1",
                          "0,3,1,gpu117,3,1,,1767225601.000000,"]
    assert len(lines) == 1 + 3 * 4


def test_env_rank_and_callback_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "12")
    monkeypatch.setenv("LOCAL_RANK", "4")
    clock = fakes.FakeClock()
    timer = StepTimer(str(tmp_path / "rank{rank}.csv"), node="n1", clock=clock)
    timer.start_step(7)
    timer.begin("optimizer")
    clock.advance(0.125)
    timer.end("optimizer")
    timer.end_step()
    timer.close()
    rows = (tmp_path / "rank12.csv").read_text().splitlines()[1:]
    assert rows[0] == "7,12,0.125,n1,4,,optimizer,,1"
    assert rows[1].startswith("7,12,0.125,n1,4,,,")


def test_written_files_feed_the_analysis(tmp_path: Path) -> None:
    clock = fakes.FakeClock()
    for rank in range(8):
        timer = StepTimer(tmp_path / "r{rank}.csv", rank=rank, node=f"gpu{rank // 4:03d}",
                          gpu=rank % 4, clock=clock)
        jitter = [1.0 + 0.01 * ((rank * 7 + s * 13) % 5 - 2) for s in range(40)]
        for step in range(40):
            slow = 1.25 if (rank == 5 and step >= 25) else 1.0
            _loop(timer, clock, 1, compute=0.75 * jitter[step] * slow, start=step)
        timer.close()
    import polars as pl

    df = pl.concat([parse_timings((tmp_path / f"r{r}.csv").read_bytes(), f"r{r}.csv")
                    for r in range(8)])
    m = prepare(df, "r*.csv")
    assert m.basis is Basis.COMPUTE and m.comm is not None
    report = analyse(m)
    assert [(s.rank, s.component) for s in report.suspects] == [(5, "gpu:gpu001/1")]
    assert report.suspects[0].since_step == 25


class _Recorder(BaseHTTPRequestHandler):
    bodies: list[dict[str, object]] = []

    def do_POST(self) -> None:  # noqa: N802
        n = int(self.headers["Content-Length"])
        _Recorder.bodies.append(json.loads(self.rfile.read(n)))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_http_sink_posts_to_a_real_server() -> None:
    server = HTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        clock = fakes.FakeClock()
        url = f"http://127.0.0.1:{server.server_port}/api/v1/timings"
        timer = StepTimer(url=url, rank=2, node="gpu009", gpu=2, clock=clock, flush_steps=5)
        _loop(timer, clock, 10, compute=0.75)
        timer.close()
    finally:
        server.shutdown()
    rows = [r for body in _Recorder.bodies for r in body["rows"]]  # type: ignore[attr-defined]
    assert _Recorder.bodies[0]["columns"] == ["step", "rank", "seconds", "node", "gpu", "stage",
                                              "section", "time", "calls"]
    assert len(rows) == 40 and rows[0] == [0, 2, 0.25, "gpu009", 2, None, "forward", None, 1]
    assert timer.sink.sent == 40  # type: ignore[attr-defined]


def test_http_sink_never_blocks_when_receiver_is_down() -> None:
    clock = fakes.FakeClock()
    timer = StepTimer(url="http://127.0.0.1:9/nothing", rank=0, node="n", clock=clock,
                      flush_steps=1)
    t0 = time.perf_counter()
    _loop(timer, clock, 200, compute=0.75)
    assert time.perf_counter() - t0 < 1.0
    timer.close()
    assert timer.sink.dropped > 0  # type: ignore[attr-defined]


class _FakeEvent:
    """The torch.cuda.Event seam: completes only when the test says so."""

    clock: fakes.FakeClock
    done = False

    def __init__(self) -> None:
        self.t = 0.0
        self.synced = False

    def record(self) -> None:
        self.t = _FakeEvent.clock.monotonic()

    def query(self) -> bool:
        return _FakeEvent.done or self.synced

    def synchronize(self) -> None:
        self.synced = True

    def elapsed_time(self, end: _FakeEvent) -> float:
        return (end.t - self.t) * 1000.0


def test_cuda_events_resolved_without_synchronising(tmp_path: Path) -> None:
    clock = fakes.FakeClock()
    _FakeEvent.clock, _FakeEvent.done = clock, False
    timer = StepTimer(tmp_path / "c.csv", rank=0, node="n", clock=clock, flush_steps=1,
                      event_factory=_FakeEvent)
    _loop(timer, clock, 2, compute=0.75)
    assert len(timer._pending) == 6  # kernels not finished: nothing blocked, nothing guessed
    _FakeEvent.done = True
    _loop(timer, clock, 1, compute=0.75, start=2)
    assert timer._pending == []
    timer.close()
    rows = (tmp_path / "c.csv").read_text().splitlines()[1:]
    sections = [r for r in rows if ",forward," in r]
    assert len(sections) == 3 and all(r.split(",")[2] == "0.25" for r in sections)


def test_needs_one_destination() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        StepTimer()
    with pytest.raises(ValueError, match="http"):
        StepTimer(url="file:///etc/passwd")


def test_repeated_sections_in_a_step_are_summed_with_their_count(tmp_path: Path) -> None:
    clock = fakes.FakeClock()
    timer = StepTimer(tmp_path / "r.csv", rank=0, node="n", clock=clock)
    for step in range(2):
        with timer.step(step):
            for _ in range(4):                      # gradient accumulation: 4 micro-batches
                with timer.section("forward"):
                    clock.advance(0.125)
                with timer.section("backward"):
                    clock.advance(0.25)
            for _ in range(3):                      # three buckets all-reduced
                with timer.section("allreduce"):
                    clock.advance(0.0625)
    timer.close()
    rows = (tmp_path / "r.csv").read_text().splitlines()[1:]
    assert rows[:4] == ["0,0,0.5,n,,,forward,,4", "0,0,1,n,,,backward,,4",
                        "0,0,0.1875,n,,,allreduce,,3", "0,0,1.6875,n,,,,1700000001.687500,"]
    df = parse_timings((tmp_path / "r.csv").read_bytes(), "r.csv")
    m = prepare(df, "r.csv")
    assert not any("duplicate" in w for w in m.warnings)  # nothing dropped as a duplicate


def test_an_end_without_begin_is_ignored_not_a_time_since_boot(tmp_path: Path) -> None:
    clock = fakes.FakeClock(start=1297.0)
    timer = StepTimer(tmp_path / "r.csv", rank=0, node="n", clock=clock)
    timer.start_step(0)
    timer.end("optimizer")                          # no begin("optimizer") in this step
    clock.advance(0.5)
    timer.end_step()
    timer.end_step()                                # a second end: ignored too
    timer.close()
    rows = (tmp_path / "r.csv").read_text().splitlines()[1:]
    assert rows == ["0,0,0.5,n,,,,1297.500000,"] and timer.unmatched == 2


def test_pause_keeps_validation_out_of_the_step(tmp_path: Path) -> None:
    clock = fakes.FakeClock()
    timer = StepTimer(tmp_path / "r.csv", rank=0, node="n", clock=clock)
    timer.start_step(5)
    clock.advance(1.0)
    timer.pause()
    clock.advance(30.0)                             # a validation loop
    timer.resume()
    clock.advance(0.25)
    timer.end_step()
    timer.close()
    assert (tmp_path / "r.csv").read_text().splitlines()[1].split(",")[2] == "1.25"
