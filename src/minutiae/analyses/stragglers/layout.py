"""``--layout tp=8,pp=4,dp=16[,cp=2][,ep=8][,order=...]``: the job's parallel layout, when known.

Rank orderings (which rank holds which coordinate; the first dimension varies fastest):

- ``megatron`` (default): Megatron-LM ``initialize_model_parallel(order="tp-cp-ep-dp-pp")``:
  ``rank = tp_i + tp (cp_i + cp (dp_i + dp pp_i))``; EP groups are carved out of data
  parallelism next to TP (expert rank ``(rank // tp) % ep``);
- ``megatron-tp-pp-dp``: Megatron with ``--use-tp-pp-dp-mapping`` (order ``tp-cp-ep-pp-dp``);
- ``torchtitan``: its device mesh ``["pp", "dp_replicate", "dp_shard", "cp", "tp"]`` (the last
  varies fastest): the same stage and TP groups as ``megatron``; EP borrows from
  ``dp_shard x cp``.

A pipeline stage (``pp_i``) is a peer group: its ranks do the same work, and stages may differ
(embedding and loss stages are heavier), so ranks are compared only within their stage. A TP
group shares every micro-batch (its noise is shared); with ``tp`` at most the node size it
must sit inside one node. The layout must agree with the data: its world size with the ranks
seen, its stages with a ``stage`` column, its TP groups with the ``node`` column; otherwise the
analysis refuses (exit 3) naming what disagrees.

Without ``--layout``, the layout a Megatron-LM or torchtitan log prints at start is the job's
(:func:`stated`, from ``formats.layout_lines``); one that disagrees with the data, or a log that
prints two, is not used: a warning says why and the peer groups are inferred.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from minutiae.errors import ConfigError, DataError

ORDERS = {"megatron": "tp-cp-ep-dp-pp", "megatron-tp-pp-dp": "tp-cp-ep-pp-dp",
          "torchtitan": "tp-cp-dp-pp"}
SIZES = ("tp", "pp", "dp", "cp", "ep")
GIVEN = "--layout"
PRINTED = "the layout the log prints,"


@dataclass(frozen=True, slots=True)
class Layout:
    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    order: str = "megatron"
    #: who says so: ``GIVEN`` (the user: disagreeing data is refused) or ``PRINTED`` (the log)
    origin: str = GIVEN

    @property
    def world(self) -> int:
        return self.tp * self.cp * self.dp * self.pp  # EP is carved out of DP: no extra ranks

    @staticmethod
    def parse(text: str) -> Layout:
        """``tp=8,pp=4,dp=16[,cp=..][,ep=..][,order=..]`` (bad syntax: ConfigError)."""
        values: dict[str, int] = {}
        order = "megatron"
        for part in (p.strip() for p in text.split(",") if p.strip()):
            key, eq, val = part.partition("=")
            key = key.strip().lower()
            if not eq:
                raise ConfigError(f"--layout {text!r}: {part!r} is not name=value")
            if key == "order":
                if val.strip() not in ORDERS:
                    raise ConfigError(f"--layout: order {val.strip()!r} unknown "
                                      f"(known: {', '.join(ORDERS)})")
                order = val.strip()
                continue
            if key not in SIZES:
                raise ConfigError(f"--layout: {key!r} unknown (sizes: {', '.join(SIZES)}, order)")
            if not val.strip().isdigit() or int(val) < 1:
                raise ConfigError(f"--layout: {key}={val.strip()!r} is not a positive integer")
            values[key] = int(val)
        if "tp" not in values and "pp" not in values and "dp" not in values:
            raise ConfigError(f"--layout {text!r}: give at least one of tp=, pp=, dp=")
        lay = Layout(tp=values.get("tp", 1), pp=values.get("pp", 1), dp=values.get("dp", 1),
                     cp=values.get("cp", 1), ep=values.get("ep", 1), order=order)
        if (lay.dp * lay.cp) % lay.ep:
            raise ConfigError(f"--layout: ep={lay.ep} must divide dp x cp = {lay.dp * lay.cp} "
                              "(expert parallelism is carved out of data parallelism)")
        return lay

    def coords(self, ranks: np.ndarray) -> dict[str, np.ndarray]:
        """Each rank's coordinate in every dimension of the ordering."""
        out: dict[str, np.ndarray] = {}
        rest = ranks.astype(np.int64)
        for dim in ORDERS[self.order].split("-"):
            if dim == "ep":
                continue  # inside dp (below)
            size = getattr(self, dim)
            out[dim] = rest % size
            rest = rest // size
        out["ep"] = (ranks.astype(np.int64) // self.tp) % self.ep
        return out

    def stages(self, ranks: np.ndarray) -> np.ndarray:
        return self.coords(ranks)["pp"]

    def text(self) -> str:
        sizes = ",".join(f"{k}={getattr(self, k)}" for k in SIZES if getattr(self, k) > 1)
        return f"{sizes or 'tp=1'} ({self.order} order)"

    def check(self, ranks: np.ndarray, stage: np.ndarray | None,
              node: tuple[str | None, ...], where: str | None) -> None:
        """Refuse (DataError) a layout that disagrees with the data, naming what disagrees."""
        lo, hi = int(ranks.min()), int(ranks.max())
        if self.world != hi + 1 or lo < 0:
            raise DataError(f"{self.origin} {self.text()} is {self.world:,} ranks; the data has "
                            f"ranks {lo}-{hi} ({ranks.size:,} seen)", where)
        mine = self.stages(ranks)
        if stage is not None:
            # the data's stage codes must partition ranks exactly as the layout's stages
            pairs = {(int(a), int(b)) for a, b in zip(mine.tolist(), stage.tolist(), strict=True)}
            if len(pairs) != len(set(mine.tolist())) or len(pairs) != len(set(stage.tolist())):
                bad = _first_split(mine, stage, ranks)
                raise DataError(f"{self.origin} {self.text()} disagrees with the stage column: "
                                f"{bad}", where)
        if all(n is not None for n in node):
            names = np.array(node, dtype=object).astype(str)
            per = int(np.max(np.unique(names, return_counts=True)[1]))
            if self.tp <= per:
                tp_group = ranks.astype(np.int64) // self.tp
                for g in np.unique(tp_group).tolist():
                    on = set(names[tp_group == g].tolist())
                    if len(on) > 1:
                        first = int(ranks[tp_group == g][0])
                        raise DataError(
                            f"{self.origin} {self.text()}: the TP group of ranks {first}-"
                            f"{first + self.tp - 1} spans nodes {', '.join(sorted(on)[:3])} "
                            f"(tp={self.tp} fits in a node of {per} ranks)", where)

    def fits(self, ranks: np.ndarray, stage: np.ndarray | None, node: tuple[str | None, ...],
             where: str | None, warnings: list[str]) -> bool:
        """:meth:`check`; a printed layout that disagrees is not used (a warning says why)
        where a given one is refused."""
        try:
            self.check(ranks, stage, node, where)
        except DataError as exc:
            if self.origin == GIVEN:
                raise
            warnings.append(f"{exc}: not used, the peer groups are inferred "
                            "(give --layout to set it)")
            return False
        return True


def stated(attrs: Mapping[str, frozenset[str]]) -> tuple[Layout | None, str | None]:
    """The layout a log prints (its ``parallel.*`` attributes, ``formats.layout_lines``), or
    None and why it cannot be used (None, None: the log prints none)."""
    got = {k.removeprefix("parallel."): sorted(v) for k, v in attrs.items()
           if k.startswith("parallel.") and v}
    if not got:
        return None, None
    twice = [f"{k} {' and '.join(v)}" for k, v in sorted(got.items()) if len(v) > 1]
    if twice:
        return None, (f"the log prints more than one parallel layout ({'; '.join(twice)}): "
                      "none used, give --layout")
    one = {k: v[0] for k, v in got.items()}
    text = ",".join([f"{k}={one[k]}" for k in SIZES if k in one]
                    + ([f"order={one['order']}"] if "order" in one else []))
    try:
        lay = replace(Layout.parse(text), origin=PRINTED)
    except ConfigError as exc:
        return None, f"the parallel layout the log prints is not usable ({exc}): not used"
    world = one.get("world", "")
    if world.isdecimal() and int(world) != lay.world:
        return None, (f"the log prints world size {world} and sizes {lay.text()} "
                      f"(= {lay.world} ranks): not used, give --layout")
    return lay, None


def _first_split(mine: np.ndarray, stage: np.ndarray, ranks: np.ndarray) -> str:
    for s in np.unique(mine).tolist():
        theirs = np.unique(stage[mine == s])
        if theirs.size > 1:
            idx = np.flatnonzero(mine == s)
            a = idx[stage[idx] == theirs[0]][0]
            b = idx[stage[idx] == theirs[1]][0]
            return (f"ranks {int(ranks[a])} and {int(ranks[b])} are both stage {s} in the "
                    "layout but in different stages in the data")
    for s in np.unique(stage).tolist():
        ours = np.unique(mine[stage == s])
        if ours.size > 1:
            idx = np.flatnonzero(stage == s)
            return (f"rank {int(ranks[idx[0]])} and the others of its data stage fall in "
                    f"layout stages {', '.join(str(int(x)) for x in ours[:4])}")
    return "the stages do not match"
