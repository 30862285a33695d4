"""``StepTimerCallback``: StepTimer inside a PyTorch Lightning ``Trainer`` (needs ``lightning``;
``pip install 'minutiae[lightning]'``)::

    from minutiae.timing.lightning import StepTimerCallback
    trainer = L.Trainer(callbacks=[StepTimerCallback("timings/rank{rank}.csv")], ...)

One row per optimizer step, numbered by ``trainer.global_step`` (so a run restarted from a
checkpoint goes on where it stopped, appending to the same file): ``forward`` and ``backward``
summed over the step's micro-batches (``calls`` = ``accumulate_grad_batches``), ``optimizer``
from ``on_before_optimizer_step`` to the end of the batch, and the step total from the first
micro-batch's start to the end of the batch whose optimizer stepped. A validation loop inside a
step is left out of it (the step's clock is paused). The timer is made in ``setup`` with the
trainer's global rank, so each DDP process writes its own rank.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl  # type: ignore[import-not-found, unused-ignore]

from minutiae.timing.timer import StepTimer


class StepTimerCallback(pl.Callback):  # type: ignore[misc, unused-ignore]
    def __init__(self, path: str | Path | None = "timings/rank{rank}.csv", *,
                 url: str | None = None, **timer_options: Any) -> None:
        super().__init__()
        self.path, self.url, self.options = path if url is None else None, url, timer_options
        self.timer: StepTimer | None = None
        self._step = -1
        self._in_optimizer = False

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self.timer is None:
            opts = {"rank": trainer.global_rank, "gpu": trainer.local_rank, **self.options}
            self.timer = StepTimer(self.path, url=self.url, **opts)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any,
                             batch_idx: int) -> None:
        t = self.timer
        if t is None:
            return
        if not t.in_step:
            self._step = int(trainer.global_step)
            t.start_step(self._step)
        t.begin("forward")

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: Any) -> None:
        if self.timer is not None:
            self.timer.end("forward")
            self.timer.begin("backward")

    def on_after_backward(self, trainer: Any, pl_module: Any) -> None:
        if self.timer is not None:
            self.timer.end("backward")

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        if self.timer is not None:
            self.timer.begin("optimizer")
            self._in_optimizer = True

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        t = self.timer
        if t is None or not t.in_step:
            return
        if self._in_optimizer:
            t.end("optimizer")
            self._in_optimizer = False
        if int(trainer.global_step) > self._step:  # the optimizer stepped: the step is over
            t.end_step()

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        if self.timer is not None:
            self.timer.pause()

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if self.timer is not None:
            self.timer.resume()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if self.timer is not None:
            self.timer.flush()

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self.timer is not None:
            self.timer.close()
            self.timer = None
