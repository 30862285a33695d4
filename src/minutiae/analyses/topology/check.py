"""Check one node's topology against a profile, and against itself (pure).

Each deviation becomes a ``Finding`` whose kind, severity and action come from the shipped rules
(``profiles/topology_rules.toml``, see ``topology_rules``). A profile attribute that the source
cannot tell is UNKNOWN (never OK): the result's status is then UNKNOWN unless something is
critical.
"""

from __future__ import annotations

from minutiae.analyses.topology.devices import culprits
from minutiae.analyses.topology.placement import place_gpus
from minutiae.analyses.topology.profile import Profile, Value, fingerprint
from minutiae.analyses.topology.rules import rules
from minutiae.model.findings import CheckResult, Finding
from minutiae.model.topology import NicKind, NodeTopology
from minutiae.model.vocab import Action, Severity, Status


def deviates(key: str, actual: Value, expected: Value) -> bool:
    """Whether ``actual`` is a problem given ``expected``, per the attribute's shipped rule."""
    return rules()[key].deviates(actual, expected)


def _message(key: str, actual: Value, expected: Value) -> str:
    if key == "nics.names":
        gone = sorted(set(str(expected).split(",")) - set(str(actual).split(",")))
        return f"NIC(s) missing: {', '.join(gone)}"
    return f"{key} is {actual!r}, expected {expected!r}"


def check_against(fp: dict[str, Value], profile: Profile,
                  t: NodeTopology | None = None) -> tuple[list[Finding], list[str]]:
    """Findings for every profile attribute the node deviates from, each naming the devices
    behind it when ``t`` is given; the attributes it cannot tell are returned as the second
    list."""
    findings: list[Finding] = []
    unknown: list[str] = []
    for key, expected in profile.expect.items():
        if key not in fp:
            unknown.append(key)
            continue
        actual = fp[key]
        if deviates(key, actual, expected):
            rule = rules()[key]
            kind, sev, act = rule.kind, rule.severity, rule.action
            sup = profile.support.get(key)
            extra = f" (fleet majority, {sup:.1%} of {profile.nodes} nodes)" if sup is not None else ""
            who = culprits(t, key, expected) if t is not None else []
            where = f" [{'; '.join(who)}]" if who else (
                f" [node {t.where or t.source}]" if t is not None else "")
            findings.append(Finding(
                kind=kind, severity=sev, action=act, message=_message(key, actual, expected) + where + extra,
                component="topology", rule=key,
                attrs={"attribute": key, "actual": str(actual), "expected": str(expected),
                       "support": sup, "devices": "; ".join(who)},
            ))
    return findings, unknown


def self_check(t: NodeTopology) -> list[Finding]:
    """What is wrong whatever the profile: links below their own maximum (width for GPUs,
    which lower their PCIe speed when idle; speed and width for NICs), NICs not ACTIVE, GPUs
    spread unevenly over NUMA nodes, GPUs without a PXB-local NIC."""
    out: list[Finding] = []
    for g in t.gpus:
        if g.pcie_width and g.pcie_max_width and g.pcie_width < g.pcie_max_width:
            out.append(Finding("pcie_link_degraded", Severity.ERROR, Action.INSPECT,
                               f"GPU{g.index} PCIe link x{g.pcie_width}, capable of x{g.pcie_max_width}",
                               pci=g.pci, component=f"gpu:{g.index}", rule="self.pcie_width"))
    for n in t.nics:
        if (n.pcie_width and n.pcie_max_width and n.pcie_width < n.pcie_max_width) or (
                n.pcie_gen and n.pcie_max_gen and n.pcie_gen < n.pcie_max_gen):
            out.append(Finding("pcie_link_degraded", Severity.ERROR, Action.INSPECT,
                               f"{n.name} PCIe link gen{n.pcie_gen}x{n.pcie_width}, capable of "
                               f"gen{n.pcie_max_gen}x{n.pcie_max_width}", pci=n.pci,
                               component=f"nic:{n.name}", rule="self.pcie"))
        if n.state and n.state.upper() not in ("ACTIVE",) and n.kind is not NicKind.UNKNOWN:
            out.append(Finding("ib_port_down", Severity.ERROR, Action.INSPECT,
                               f"{n.name} port {n.port or 1} is {n.state}", pci=n.pci,
                               component=f"ib:{n.name}/{n.port or 1}", rule="self.state"))
    per: dict[int, list[int]] = {}
    for g in t.gpus:
        if g.numa is not None:
            per.setdefault(g.numa, []).append(g.index)
    all_numas = set(t.numa_cpus) or set(per)
    if len(all_numas) > 1 and per and len({len(v) for v in per.values()}) > 1:
        out.append(Finding("numa_unbalanced", Severity.WARNING, Action.NONE,
                           "GPUs per NUMA node: " + ", ".join(
                               f"node{k}={len(v)} (GPU{','.join(map(str, v))})" for k, v in sorted(per.items())),
                           component="topology", rule="self.numa"))
    if t.nics:
        far = [p for p in place_gpus(t) if p.nearest_nics and not p.gdr_local]
        for p in far:
            out.append(Finding("gpu_without_local_nic", Severity.WARNING, Action.NONE,
                               f"GPU{p.gpu.index}: nearest NIC {', '.join(p.nearest_nics)} via "
                               f"{p.nic_path.value} (no NIC within PXB: GPUDirect RDMA crosses the CPU)",
                               pci=p.gpu.pci, component=f"gpu:{p.gpu.index}", rule="self.local_nic"))
    return out


def check_topology(t: NodeTopology, profile: Profile | None = None) -> CheckResult:
    findings = self_check(t)
    unknown: list[str] = []
    observed = 0
    if profile is not None:
        fp = fingerprint(t)
        more, unknown = check_against(fp, profile, t)
        observed = len(profile.expect) - len(unknown)
        seen = {(f.kind, f.component, f.message) for f in findings}
        findings += [f for f in more if (f.kind, f.component, f.message) not in seen]
    statuses = [Status.CRITICAL if f.severity >= Severity.CRITICAL or f.action.drains
                else Status.WARNING for f in findings]
    if unknown:
        statuses.append(Status.UNKNOWN)
    if not t.gpus and profile is None:
        statuses.append(Status.UNKNOWN)
        unknown.append("no GPU visible")
    reason = f"source cannot tell: {', '.join(unknown)}" if unknown else None
    return CheckResult(check="topology", status=Status.worst(statuses), findings=tuple(findings),
                       reason=reason, observed=observed)
