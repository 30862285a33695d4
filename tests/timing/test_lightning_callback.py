"""StepTimerCallback inside a real Lightning Trainer on the CPU (tiny model): gradient
accumulation, validation loops and a restart from a checkpoint."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
L = pytest.importorskip("lightning.pytorch")

from minutiae.timing.lightning import StepTimerCallback  # noqa: E402


class _Tiny(L.LightningModule):  # type: ignore[misc, name-defined]
    def __init__(self, val_sleep: float = 0.0) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)
        self.val_sleep = val_sleep

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        time.sleep(self.val_sleep)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _loader(n: int = 64) -> Any:
    g = torch.Generator().manual_seed(0)
    ds = torch.utils.data.TensorDataset(torch.randn(n, 8, generator=g), torch.randn(n, 1, generator=g))
    return torch.utils.data.DataLoader(ds, batch_size=4)


def _trainer(tmp: Path, cb: StepTimerCallback, **kw: Any) -> Any:
    return L.Trainer(accelerator="cpu", devices=1, callbacks=[cb], logger=False,
                     enable_progress_bar=False, enable_model_summary=False,
                     default_root_dir=str(tmp), **kw)


def _rows(path: Path) -> list[list[str]]:
    lines = path.read_text().splitlines()
    assert lines[0] == "step,rank,seconds,node,gpu,stage,section,time,calls"
    return [ln.split(",") for ln in lines[1:]]


def test_accumulation_and_validation(tmp_path: Path) -> None:
    cb = StepTimerCallback(str(tmp_path / "rank{rank}.csv"), node="n1", flush_steps=3)
    trainer = _trainer(tmp_path, cb, max_epochs=2, accumulate_grad_batches=4,
                       limit_val_batches=2, val_check_interval=8, num_sanity_val_steps=1)
    # a validation pass sleeps 2 x 1.5 s: a step that counted it would be >= 3 s, whatever the load
    trainer.fit(_Tiny(val_sleep=1.5), _loader(), _loader(8))
    rows = _rows(tmp_path / "rank0.csv")
    steps = [r for r in rows if r[6] == ""]
    assert [int(r[0]) for r in steps] == list(range(8))  # 16 batches x 2 epochs / 4 = 8 steps
    for step in range(8):
        mine = {r[6]: r for r in rows if int(r[0]) == step and r[6]}
        assert set(mine) == {"forward", "backward", "optimizer"}
        assert (mine["forward"][8], mine["backward"][8], mine["optimizer"][8]) == ("4", "4", "1")
        total = float(next(r for r in steps if int(r[0]) == step)[2])
        assert sum(float(r[2]) for r in mine.values()) <= total < 3.0  # no validation, no boot
    assert cb.timer is None  # closed at teardown


def test_restart_from_checkpoint_goes_on_numbering(tmp_path: Path) -> None:
    ckpt = L.callbacks.ModelCheckpoint(dirpath=str(tmp_path / "ckpt"), save_last=True,
                                       every_n_train_steps=2)
    first = StepTimerCallback(str(tmp_path / "rank{rank}.csv"), node="n1")
    trainer = _trainer(tmp_path, first, max_steps=4, accumulate_grad_batches=2,
                       limit_val_batches=0)
    trainer.callbacks.append(ckpt)
    trainer.fit(_Tiny(), _loader())
    resumed = StepTimerCallback(str(tmp_path / "rank{rank}.csv"), node="n1")
    _trainer(tmp_path, resumed, max_steps=7, accumulate_grad_batches=2, limit_val_batches=0,
             ).fit(_Tiny(), _loader(), ckpt_path=str(tmp_path / "ckpt" / "last.ckpt"))
    rows = _rows(tmp_path / "rank0.csv")
    assert [int(r[0]) for r in rows if r[6] == ""] == list(range(7))  # 0-3, then 4-6: once each
    assert all(r[8] == "2" for r in rows if r[6] in ("forward", "backward"))
