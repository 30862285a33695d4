"""InfiniBand emitter: per-port sysfs counters over time (``ib.csv``, change-only rows) and the
final snapshot as a real ``/sys/class/infiniband`` tree (layout and value text as in
../shared/realdata/infiniband/gpud/sys-class-infiniband-h100.0). Vectorised with numpy."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import numpy as np

from minutiae.scoring.truth import TruthEvent
from minutiae.sim.world.effects import cumulative
from minutiae.sim.world.fleet import hca_name

#: error counters written to ib.csv (cumulative, as sysfs shows them)
ERROR_COUNTERS = (
    "symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors",
    "port_rcv_remote_physical_errors", "local_link_integrity_errors",
    "excessive_buffer_overrun_errors", "port_xmit_discards",
)
OTHER_COUNTERS = (
    "port_rcv_constraint_errors", "unicast_rcv_packets", "unicast_xmit_packets",
    "port_xmit_constraint_errors", "port_rcv_switch_relay_errors", "port_xmit_packets",
    "VL15_dropped", "port_xmit_wait", "port_xmit_data", "multicast_xmit_packets", "port_rcv_data",
    "port_rcv_packets", "multicast_rcv_packets",
)
HW_COUNTERS = (
    "lifespan", "roce_slow_restart_cnps", "resp_cqe_error", "rx_dct_connect", "rx_read_requests",
    "out_of_buffer", "req_remote_access_errors", "duplicate_request", "local_ack_timeout_err",
    "rnr_nak_retry_err", "rx_write_requests", "resp_cqe_flush_error", "out_of_sequence",
    "rx_atomic_requests", "roce_slow_restart_trans", "roce_adp_retrans_to", "implied_nak_seq_err",
    "packet_seq_err", "resp_local_length_error", "roce_slow_restart", "req_remote_invalid_request",
    "req_cqe_error", "resp_remote_access_errors", "roce_adp_retrans", "req_cqe_flush_error",
    "rx_icrc_encapsulated",
)
STATE_TEXT = {1: "1: DOWN", 2: "2: INIT", 4: "4: ACTIVE"}
PHYS_TEXT = {2: "2: Polling", 3: "3: Disabled", 5: "5: LinkUp"}


@dataclass(frozen=True, slots=True)
class IbSeries:
    """Per-port series on the sample grid ``times`` (shape T); arrays are (T, P)."""

    times: np.ndarray
    counters: dict[str, np.ndarray]
    state: np.ndarray
    phys: np.ndarray
    degraded: np.ndarray      # bool: rate retrained down
    xmit_bytes: np.ndarray    # cumulative data (for the snapshot's port_xmit_data)
    blip_s: np.ndarray | None = None  # seconds the port left ACTIVE at that sample (a flap), 0: none
    boots: tuple[float, ...] = ()     # boot times: port states change at their exact seconds
    settle_s: float = 0.0


def simulate_ib(times: np.ndarray, ports: int, events: list[TruthEvent], boots: list[float],
                settle_s: float, busy: np.ndarray, rng: np.random.Generator) -> IbSeries:
    t_n = len(times)
    inc = {c: np.zeros((t_n, ports), dtype=np.int64) for c in ERROR_COUNTERS}
    # healthy background: rare small increments (the real snapshot shows port_rcv_errors 14,
    # excessive_buffer_overrun_errors 15 on a healthy port)
    for c, p in (("port_rcv_errors", 0.0005), ("excessive_buffer_overrun_errors", 0.0005)):
        inc[c] += rng.binomial(1, p, size=(t_n, ports))
    state = np.full((t_n, ports), 4, dtype=np.int8)
    phys = np.full((t_n, ports), 5, dtype=np.int8)
    degraded = np.zeros((t_n, ports), dtype=bool)
    blip = np.zeros((t_n, ports), dtype=np.float64)
    for b in boots:
        down = (times >= b - 300) & (times < b + settle_s / 2)
        init = (times >= b + settle_s / 2) & (times < b + settle_s)
        state[down] = 1
        phys[down] = 2
        state[init] = 2
    for ev in events:
        if not ev.cls.startswith("ib_"):
            continue
        p = int(ev.details.get("gpu", 0)) % ports
        win = (times >= ev.start) & (times < ev.end)
        first = int(np.searchsorted(times, ev.start))
        if ev.cls == "ib_link_down":
            # a failed link keeps training: DOWN / Polling, as the real H100 capture of GPUd's
            # testdata shows (../shared/realdata/infiniband/gpud/ibstat.47.0.h100.some.down.
            # with.polling.1); Disabled is a port switched off by software, not a fault
            state[win, p] = 1
            phys[win, p] = 2
            if first < t_n:
                inc["link_downed"][first, p] += 1
                inc["link_error_recovery"][first, p] += int(rng.integers(1, 4))
        elif ev.cls == "ib_link_flap":
            n = int(rng.integers(4, 20))
            idx = np.searchsorted(times, np.sort(rng.uniform(ev.start, ev.end, n)))
            idx = idx[idx < t_n]
            np.add.at(inc["link_downed"][:, p], idx, 1)
            np.add.at(inc["link_error_recovery"][:, p], idx, 1)
            np.add.at(inc["symbol_error"][:, p], idx, rng.integers(5, 200, len(idx)))
            w = np.flatnonzero(win)
            if len(w):
                # a flap: the link retrains in seconds and is ACTIVE again at the subnet
                # manager's next sweep; 30 % of the samples see a down of 10-60 s start
                r = rng.random(len(w))
                downs = r < 0.3
                blip[w[downs], p] = np.round(10.0 + 50.0 * r[downs] / 0.3)
        elif ev.cls == "ib_symbol_errors":
            per_sample = float(rng.uniform(20, 2000)) * (times[1] - times[0] if t_n > 1 else 300) / 3600
            w = np.flatnonzero(win)
            ramp = np.linspace(0.2, 2.0, len(w)) if len(w) else np.zeros(0)
            inc["symbol_error"][w, p] += rng.poisson(per_sample * ramp)
            inc["port_rcv_errors"][w, p] += rng.poisson(per_sample * ramp * 0.05)
        elif ev.cls == "ib_rate_degraded":
            degraded[win, p] = True
            if first < t_n:
                inc["link_downed"][first, p] += 1
    counters = {c: cumulative(v, times, boots) for c, v in inc.items()}
    base = rng.integers(0, 3, size=(1, ports))
    counters["port_rcv_errors"] = counters["port_rcv_errors"] + base
    dt = float(times[1] - times[0]) if t_n > 1 else 300.0
    rate = np.where(busy[:, None], 2.0e10, 1.0e6) * dt  # bytes per sample while a job runs
    up = (state == 4)
    xmit = np.cumsum(np.where(up, rate, 0.0) * rng.uniform(0.9, 1.1, size=(t_n, ports)), axis=0)
    return IbSeries(times, counters, state, phys, degraded, xmit, blip, tuple(boots), settle_s)


def write_ib_csv(fh: TextIO, s: IbSeries, rate_text: str, degraded_text: str) -> int:
    """Rows ``time,device,port,counter,value`` at the first sample, at every change, and at the
    last sample (counters cumulative, value as sysfs text); a port that left ACTIVE for less
    than a sample (``blip_s``) has its DOWN/Polling rows at the sample and its ACTIVE/LinkUp
    rows at the second it came back. Returns the row count."""
    t_n, ports = s.state.shape
    rows: list[tuple[float, int, str, str]] = []
    series: list[tuple[str, np.ndarray, dict[int, str] | None]] = [
        (c, s.counters[c], None) for c in ERROR_COUNTERS]
    series += [("state", s.state, STATE_TEXT), ("phys_state", s.phys, PHYS_TEXT),
               ("rate", s.degraded.astype(np.int8), {0: rate_text, 1: degraded_text})]
    for name, arr, text in series:
        changed = np.zeros((t_n, ports), dtype=bool)
        changed[0] = True
        changed[-1] = True
        if t_n > 1:
            changed[1:] |= arr[1:] != arr[:-1]
        ti, pi = np.nonzero(changed)
        vals = arr[ti, pi]
        for a, b, v in zip(ti.tolist(), pi.tolist(), vals.tolist(), strict=True):
            rows.append((float(s.times[a]), b, name, text[int(v)] if text else str(int(v))))
    if s.blip_s is not None and t_n > 2:
        # only inside a stretch of ACTIVE samples (no state row of its own at that sample)
        inside = np.zeros((t_n, ports), dtype=bool)
        inside[1:-1] = (s.state[1:-1] == 4) & (s.state[:-2] == 4) & (s.state[2:] == 4)
        for a, b in zip(*np.nonzero((s.blip_s > 0) & inside), strict=True):
            t0, t1 = float(s.times[a]), float(s.times[a]) + float(s.blip_s[a, b])
            rows += [(t0, int(b), "state", STATE_TEXT[1]), (t0, int(b), "phys_state", PHYS_TEXT[2]),
                     (t1, int(b), "state", STATE_TEXT[4]), (t1, int(b), "phys_state", PHYS_TEXT[5])]
    # a boot's port states at their exact seconds (the samples show the same states, coarser):
    # DOWN/Polling while the node reboots, INIT half way through the settle, ACTIVE after it;
    # not for a port that is down for a fault then
    for bt in s.boots:
        after = int(np.searchsorted(s.times, bt + s.settle_s))
        if not s.times[0] < bt - 300 or after >= t_n:
            continue
        for b in np.flatnonzero(s.state[after] == 4).tolist():
            for t, st, ph in ((bt - 300, 1, 2), (bt + s.settle_s / 2, 2, 5), (bt + s.settle_s, 4, 5)):
                rows += [(float(round(t)), b, "state", STATE_TEXT[st]), (float(round(t)), b, "phys_state", PHYS_TEXT[ph])]
    rows.sort(key=lambda r: (r[0], r[1]))
    for t, p, name, val in rows:
        fh.write(f"{t:.0f},{hca_name(p)},1,{name},{val}\n")
    return len(rows)


class _Writer:
    """Writes small read-only files; a file whose text was already written in this tree becomes
    a hard link to the first one (most counters are "0"): same bytes for any reader, ~4x fewer
    inodes to create."""

    def __init__(self) -> None:
        self.first: dict[str, str] = {}

    def put(self, path: str, text: str) -> None:
        src = self.first.get(text)
        if src is not None:
            try:
                os.link(src, path)
                return
            except OSError:
                pass
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o444)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
        self.first.setdefault(text, path)


def write_sysfs(root: Path, s: IbSeries, fleet_cfg: dict[str, object], fw: str,
                rng: np.random.Generator) -> None:
    """The last sample as a real sysfs tree under ``root/class/infiniband`` (files read-only,
    as in sysfs)."""
    ib = os.path.join(root, "class", "infiniband")
    _put = _Writer().put
    ports = s.state.shape[1]
    last = -1
    for p in range(ports):
        dev = os.path.join(ib, hca_name(p))
        port = os.path.join(dev, "ports", "1")
        os.makedirs(os.path.join(port, "counters"), exist_ok=True)
        os.makedirs(os.path.join(port, "hw_counters"), exist_ok=True)
        _put(os.path.join(dev, "hca_type"), f"{fleet_cfg.get('hca_type', 'MT4129')}\n")
        _put(os.path.join(dev, "fw_ver"), f"{fw}\n")
        _put(os.path.join(dev, "board_id"), f"{fleet_cfg.get('board_id', 'MT_0000000838')}\n")
        rate = fleet_cfg.get("ib_rate_degraded") if s.degraded[last, p] else fleet_cfg.get("ib_rate")
        _put(os.path.join(port, "rate"), f"{rate}\n")
        _put(os.path.join(port, "state"), f"{STATE_TEXT[int(s.state[last, p])]}\n")
        _put(os.path.join(port, "phys_state"), f"{PHYS_TEXT[int(s.phys[last, p])]}\n")
        _put(os.path.join(port, "link_layer"), "InfiniBand\n")
        data = int(s.xmit_bytes[last, p] // 4)     # port_*_data counts 4-octet words
        pkts = int(s.xmit_bytes[last, p] // 4096)
        values = {c: int(s.counters[c][last, p]) for c in ERROR_COUNTERS}
        values.update({c: 0 for c in OTHER_COUNTERS})
        values.update(port_xmit_data=data, port_rcv_data=int(data * 1.0004), port_xmit_packets=pkts,
                      unicast_xmit_packets=pkts, port_rcv_packets=int(pkts * 1.0065),
                      unicast_rcv_packets=int(pkts * 1.0065), port_xmit_wait=int(pkts // 127))
        cdir = os.path.join(port, "counters")
        for c, v in values.items():
            _put(os.path.join(cdir, c), f"{v}\n")
        hdir = os.path.join(port, "hw_counters")
        for c in HW_COUNTERS:
            v = int(pkts // 80) if c in ("rx_write_requests", "rx_read_requests") else 0
            _put(os.path.join(hdir, c), f"{v}\n")
