"""dcgm-exporter Prometheus text → the common GPU observations (pure).

Field names are those of dcgm-exporter's counter CSVs (``DCGM_FI_DEV_*``) and of its 1.x
compatibility names (``dcgm_*``). Samples carry the labels ``gpu``, ``UUID``, ``pci_bus_id``,
``device``, ``modelName``, ``Hostname`` and ``DCGM_FI_DRIVER_VERSION``; the component is
``gpu:<pci>`` from ``pci_bus_id`` (``gpu:nvidia<N>`` when an old exporter omits it).

MIG (issue 16): with MIG on, every sample carries ``GPU_I_ID``/``GPU_I_PROFILE`` and device-level
fields (temperature, ECC, row remapping, XIDs, PCIe, NVLink) repeat once per instance: they are
read once per physical GPU (the first sample; NVLink totals are not summed over instances), and
``mig_instances`` counts the instances seen. XIDs: ``DCGM_FI_DEV_XID_ERRORS`` is ``last_xid``;
``DCGM_EXP_XID_ERRORS_COUNT{xid="N"}`` (the exporter's XID-count collector, per time window) with
a count > 0 gives ``xid_window`` = the code the XID catalog ranks worst (all such codes in
``xid_window_codes``); both are judged through the XID catalog by the counter rules.
``DCGM_EXP_GPU_HEALTH_STATUS{health_watch, health_error_code}`` (DCGM's own health watches)
gives ``dcgm_health_fail`` / ``dcgm_health_warn``: the watches failing / warning, with DCGM's
error code.
Parsing uses prometheus_client's text parser; a line it rejects becomes a ``Problem``, and so
does a scrape with no field the rules judge (a counters CSV of ``DCGM_FI_PROF_*`` utilisation
fields only): GPUs nothing was measured on are never "healthy".
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from minutiae.errors import ParseError
from minutiae.model.gpu_metrics import gpu_component, normalize_pci
from minutiae.model.snapshot import Snapshot, SnapshotBuilder

SOURCE = "dcgm"

#: DCGM field → (metric, kind): kind "int" counter, "float" gauge, "bool" (non-zero = yes),
#: "sum" (summed into the metric over all such fields)
FIELDS: dict[str, tuple[str, str]] = {
    "DCGM_FI_DEV_GPU_TEMP": ("temperature_c", "float"),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", "float"),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": ("pcie_replay", "int"),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": ("ecc_sbe_volatile", "int"),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("ecc_dbe_volatile", "int"),
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": ("ecc_sbe_aggregate", "int"),
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": ("ecc_dbe_aggregate", "int"),
    "DCGM_FI_DEV_RETIRED_SBE": ("retired_pages_sbe", "int"),
    "DCGM_FI_DEV_RETIRED_DBE": ("retired_pages_dbe", "int"),
    "DCGM_FI_DEV_RETIRED_PENDING": ("retired_pages_pending", "bool"),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": ("remap_correctable", "int"),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": ("remap_uncorrectable", "int"),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": ("remap_failure", "bool"),
    "DCGM_FI_DEV_ROW_REMAP_PENDING": ("remap_pending", "bool"),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": ("clock_event_reasons", "int"),
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": ("clock_event_reasons", "int"),
    "DCGM_FI_DEV_XID_ERRORS": ("last_xid", "int"),
    "DCGM_FI_DEV_PCIE_LINK_GEN": ("pcie_gen_current", "int"),
    "DCGM_FI_DEV_PCIE_LINK_WIDTH": ("pcie_width_current", "int"),
    "DCGM_FI_DEV_PCIE_MAX_LINK_GEN": ("pcie_gen_max", "int"),
    "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH": ("pcie_width_max", "int"),
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": ("nvlink_errors", "sum"),
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": ("nvlink_errors", "sum"),
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": ("nvlink_errors", "sum"),
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": ("nvlink_errors", "sum"),
}
#: dcgm-exporter 1.x compatibility names
COMPAT: dict[str, str] = {
    "dcgm_gpu_temp": "DCGM_FI_DEV_GPU_TEMP",
    "dcgm_power_usage": "DCGM_FI_DEV_POWER_USAGE",
    "dcgm_pcie_replay_counter": "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "dcgm_xid_errors": "DCGM_FI_DEV_XID_ERRORS",
}
LABEL_FIELDS = {"DCGM_FI_DRIVER_VERSION": "driver_version", "DCGM_FI_DEV_VBIOS_VERSION": "vbios_version",
                "modelName": "name", "UUID": "uuid"}


XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
#: the exporter's health collector: one sample per GPU and DCGM health watch (``health_watch``
#: PCIE, NVLINK, MEM, ...; ``health_error_code`` DCGM_FR_*), value DCGM's result: 0 pass,
#: 10 warn, 20 fail (dcgmHealthWatchResults_t)
HEALTH = "DCGM_EXP_GPU_HEALTH_STATUS"
HEALTH_WARN, HEALTH_FAIL = 10, 20


def _health(s: Sample, comp: str, health: dict[str, dict[str, tuple[float, str]]]) -> None:
    watch = s.labels.get("health_watch") or "?"
    code = s.labels.get("health_error_code") or "?"
    seen = health.setdefault(comp, {})
    if s.value is not None and (watch not in seen or s.value > seen[watch][0]):
        seen[watch] = (s.value, code)


def _add_health(b: SnapshotBuilder, comp: str, watches: dict[str, tuple[float, str]]) -> None:
    """``dcgm_health_fail`` / ``dcgm_health_warn``: the failing / warning watches with DCGM's
    error code (empty when none)."""
    def which(lo: float, hi: float) -> str:
        return ", ".join(f"{w}: {code}" for w, (v, code) in sorted(watches.items()) if lo <= v < hi)
    b.add(comp, "dcgm_health_fail", which(HEALTH_FAIL, math.inf))
    b.add(comp, "dcgm_health_warn", which(HEALTH_WARN, HEALTH_FAIL))


def _xid_count(s: Sample, comp: str, xids: dict[str, list[int]]) -> None:
    code = s.labels.get("xid", "")
    if _is_int(code) and s.value is not None and s.value > 0 and int(code) not in xids.get(comp, []):
        xids.setdefault(comp, []).append(int(code))


def _add_xids(b: SnapshotBuilder, comp: str, codes: list[int], exported: bool) -> None:
    """``xid_window``: the code the XID catalog ranks worst (0 when the collector is on and saw
    none); ``xid_window_codes``: all of them."""
    if not exported:
        return
    if not codes:
        b.add(comp, "xid_window", 0)
        return
    from minutiae.rules.logs import xid_catalog

    cat = xid_catalog()

    def rank(code: int) -> tuple[int, int]:
        e = cat.get(code)
        return (int(e.action), int(e.severity)) if e else (int(cat.unknown_action), int(cat.unknown_severity))
    b.add(comp, "xid_window", max(codes, key=rank))
    b.add(comp, "xid_window_codes", ",".join(str(c) for c in sorted(codes)))


def _is_int(text: str) -> bool:
    """ASCII digits only (str.isdigit() also accepts superscripts such as '¹')."""
    return text.isascii() and text.isdigit()


def _names(text: str) -> list[Sample]:
    """Samples with their exposition name (prometheus_client appends ``_total`` to counters)."""
    out: list[Sample] = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if fam.type == "counter" and s.name == fam.name + "_total" and fam.name.startswith(("DCGM", "dcgm")):
                s = s._replace(name=fam.name)
            out.append(s)
    return out


def _samples(text: str, where: str, b: SnapshotBuilder) -> Iterable[Sample]:
    try:
        return _names(text)
    except (ValueError, IndexError, TypeError):
        pass
    out: list[Sample] = []
    lines = text.splitlines()
    for i, line in enumerate(lines, 1):
        if not line.strip() or line.startswith("#"):
            continue
        typ = next((ln for ln in reversed(lines[: i - 1]) if ln.startswith("# TYPE ")), "")
        name = line.split("{", 1)[0].split(" ", 1)[0]
        head = typ + "\n" if typ.split(" ")[2:3] == [name] else ""
        try:
            out.extend(_names(head + line + "\n"))
        except (ValueError, IndexError, TypeError):
            b.problem("node", f"{where}:{i}", f"not Prometheus text: {line.strip()[:60]!r}")
    return out


def _component(labels: dict[str, str], name: str, where: str, b: SnapshotBuilder) -> str | None:
    """A sample's GPU component: by its PCI address, else its device/gpu label (None, and a
    problem, when it has neither)."""
    pci = normalize_pci(labels.get("pci_bus_id", "")) if labels.get("pci_bus_id") else None
    if pci is not None:
        return gpu_component(pci)
    dev = labels.get("device") or (f"nvidia{labels['gpu']}" if _is_int(labels.get("gpu", "")) else "")
    if not dev:
        b.problem("node", where, f"sample {name} has neither pci_bus_id nor gpu/device labels")
        return None
    return f"gpu:{dev}"


def _add_value(b: SnapshotBuilder, comp: str, metric: str, kind: str, v: float) -> None:
    if kind == "float":
        b.add(comp, metric, float(v))
    elif kind == "bool":
        b.add(comp, metric, v != 0)
    else:
        b.add(comp, metric, int(v))


class _Scrape:
    """What one scrape adds up to, sample by sample."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.b = SnapshotBuilder(SOURCE)
        self.sums: dict[tuple[str, str], int] = {}
        self.seen: set[tuple[str, str]] = set()
        self.summed: set[tuple[str, str, str]] = set()
        self.gpus: dict[str, None] = {}
        self.instances: dict[str, set[str]] = {}
        self.xids: dict[str, list[int]] = {}
        self.driver: str | None = None
        self.judged = False  # a sample of a field the rules judge was seen
        self.health: dict[str, dict[str, tuple[float, str]]] = {}

    def add(self, s: Sample) -> None:
        field = COMPAT.get(s.name, s.name)
        if not field.startswith("DCGM_"):
            return
        b = self.b
        comp = _component(s.labels, s.name, self.where, b)
        if comp is None:
            return
        if comp not in self.gpus:
            self.gpus[comp] = None
            for label, metric in LABEL_FIELDS.items():
                if s.labels.get(label):
                    b.add(comp, metric, s.labels[label])
            self.driver = self.driver or s.labels.get("DCGM_FI_DRIVER_VERSION")
        if s.labels.get("GPU_I_ID"):
            self.instances.setdefault(comp, set()).add(s.labels["GPU_I_ID"])
        if field == XID_COUNT:
            self.judged = True
            _xid_count(s, comp, self.xids)
            return
        if field == HEALTH:
            self.judged = True
            if s.value is None or math.isnan(s.value):
                b.problem(comp, f"{self.where}: {s.name}", f"not a number: {s.value!r}")
            else:
                _health(s, comp, self.health)
            return
        spec = FIELDS.get(field)
        if spec is None:
            return
        self.judged = True
        metric, kind = spec
        v = s.value
        if v is None or math.isnan(v) or math.isinf(v):
            b.problem(comp, f"{self.where}: {s.name}", f"not a number: {v!r}")
        elif kind == "sum":
            key = (comp, field, s.labels.get("link", ""))  # once per GPU, not per MIG instance
            if key not in self.summed:
                self.summed.add(key)
                self.sums[(comp, metric)] = self.sums.get((comp, metric), 0) + int(v)
        elif (comp, metric) not in self.seen:  # device-level: the first (MIG instance) sample
            self.seen.add((comp, metric))
            _add_value(b, comp, metric, kind, v)


def parse_dcgm(text: str, where: str = "dcgm-exporter") -> Snapshot:
    """Parse one dcgm-exporter scrape. Raises ``ParseError`` when it holds no DCGM sample at all."""
    sc = _Scrape(where)
    for s in _samples(text, where, sc.b):
        sc.add(s)
    b = sc.b
    for (comp, metric), total in sc.sums.items():
        b.add(comp, metric, total)
    for comp, ids in sc.instances.items():
        b.add(comp, "mig_instances", len(ids))
    for comp in sc.gpus:
        _add_xids(b, comp, sc.xids.get(comp, []), XID_COUNT in text)
    for comp, watches in sc.health.items():
        _add_health(b, comp, watches)
    if not sc.gpus:
        raise ParseError("no DCGM_FI_* samples (is this a dcgm-exporter /metrics page?)", where)
    if not sc.judged:  # e.g. a counters CSV of DCGM_FI_PROF_* fields only: never 'healthy'
        b.problem("node", where, "no health field in the scrape (temperature, ECC, row "
                  "remapping, XID, PCIe, NVLink, throttle): nothing to judge the GPUs by")
    if sc.driver:
        b.add("node", "driver_version", sc.driver)
    b.add("node", "gpu_count", len(sc.gpus))
    return b.build()
