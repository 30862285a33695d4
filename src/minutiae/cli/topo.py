"""``minutiae topo``: how this node (or a capture) is wired, its binding plan, its check, and the
fleet's golden configuration. Thin: reading in sources, maths in analyses, printing here."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from minutiae.errors import ConfigError

_FORMATS = ["exports", "numactl", "taskset", "slurm", "torchrun", "systemd"]


def _reserve(text: str | None) -> tuple[int, ...] | None:
    from minutiae.model.topology import parse_cpulist

    if text is None:
        return None
    if text.strip().lower() == "none":
        return ()
    try:
        return parse_cpulist(text)
    except ValueError as exc:
        raise ConfigError(f"--reserve-cores {text!r}: {exc} (a CPU list such as 0,1,52-53 or none)") from None


def _load(from_file: str | None, sysfs_root: str | None) -> Any:
    from minutiae.analyses.topology import read_sysfs as src

    if from_file is not None and sysfs_root is not None:
        raise ConfigError("use either --from FILE or --sysfs-root DIR, not both")
    if from_file is not None:
        return src.read_capture(from_file)
    topo = src.read_sysfs_topology(sysfs_root or "/sys")
    if sysfs_root is None:  # live node: nvidia-smi knows the NVLinks
        text = src.run_nvidia_smi_topo()
        if text:
            from minutiae.analyses.topology.parse.detect import merge_matrix
            from minutiae.analyses.topology.parse.matrix import parse_topo_matrix

            topo = merge_matrix(topo, parse_topo_matrix(text, "nvidia-smi topo -m"))
    return topo


def _print_table(topo: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    from minutiae.analyses.topology.placement import place_gpus
    from minutiae.model.topology import format_cpulist

    con = Console()
    table = Table(title=f"{topo.where or topo.source} ({topo.source})")
    for col in ("GPU", "PCI", "NUMA", "local CPUs", "nearest NIC(s)", "path", "nearest NVMe",
                "NVLink peers"):
        table.add_column(col, overflow="fold")
    for p in place_gpus(topo):
        g = p.gpu
        links = ", ".join(f"{lk.peer}" for lk in g.nvlinks) if g.nvlinks else "-"
        table.add_row(str(g.index), g.pci or "-", "-" if p.numa is None else str(p.numa),
                      format_cpulist(p.cpus) or "-", ", ".join(p.nearest_nics) or "-",
                      p.nic_path.value if p.nearest_nics else "-",
                      ", ".join(p.nearest_nvme) or "-",
                      links if len(g.nvlinks) < 4 else f"{len(g.nvlink_peers)} GPUs "
                      f"(NV{g.nvlinks[0].links})" if g.nvlinks[0].links else links)
    con.print(table)
    if topo.nics:
        nt = Table(title="NICs")
        for col in ("name", "PCI", "NUMA", "kind", "rate", "state", "firmware"):
            nt.add_column(col, overflow="fold")
        for n in topo.nics:
            nt.add_row(n.name, n.pci or "-", "-" if n.numa is None else str(n.numa), n.kind.value,
                       f"{n.rate_gbps:g} Gb/s" if n.rate_gbps else "-", n.state or "-",
                       n.firmware or "-")
        con.print(nt)
    for m in topo.missing:
        con.print(f"[yellow]missing:[/] {m}", highlight=False)
    for m in topo.notes:
        con.print(f"[dim]note:[/] {m}", highlight=False)


def _learn(directory: str, as_json: bool, write_profile: str | None, min_support: float,
           workers: int) -> int:
    import os

    from minutiae.analyses.topology import read_sysfs as src
    from minutiae.analyses.topology.learn import fingerprint_files, learn
    from minutiae.analyses.topology.profile import profile_to_toml

    root = Path(directory)
    items = [(str(p.relative_to(root).with_suffix("")), p) for p in src.iter_capture_files(root)]
    workers = workers if workers > 0 else min(4, os.cpu_count() or 1)
    fps, skipped, parsed = fingerprint_files(items, src.read_capture_bytes, workers)
    res = learn(fps, name=f"learned:{root.name}", min_support=min_support)
    if res.nodes == 0:
        raise ConfigError(f"{directory}: no readable topology capture"
                          + (f" ({len(skipped)} unreadable)" if skipped else ""))
    if write_profile:
        src.write_text(write_profile, profile_to_toml(res.profile))
    if as_json:
        click.echo(json.dumps({
            "nodes": res.nodes, "groups": res.groups, "parsed": parsed,
            "profile": res.profile.expect, "support": res.profile.support,
            "ambiguous": {k: [list(x) for x in v] for k, v in res.ambiguous.items()},
            "deviating_nodes": list(res.deviating_nodes()),
            "deviations": [{"node": d.node, "attribute": d.attribute, "actual": d.actual,
                            "expected": d.expected, "support": d.support, "problem": d.problem}
                           for d in res.deviations],
            "skipped": [{"path": p, "error": e} for p, e in skipped],
        }, indent=2))
    else:
        from rich.console import Console
        from rich.table import Table

        con = Console()
        t = Table(title=f"golden configuration of {res.nodes} node(s) "
                        f"({res.groups} distinct fingerprint(s))")
        t.add_column("attribute", overflow="fold")
        t.add_column("majority value", overflow="fold")  # values are long (pairing): never cut
        t.add_column("support", justify="right")
        for k, v in res.profile.expect.items():
            t.add_row(k, str(v), f"{res.profile.support[k]:.1%}")
        con.print(t)
        for k, pairs in res.ambiguous.items():
            con.print(f"[yellow]no majority:[/] {k}: " + ", ".join(f"{a} ({b:.0%})" for a, b in pairs),
                      highlight=False)
        if res.deviations:
            d = Table(title=f"{len(res.deviating_nodes())} deviating node(s)")
            for col in ("node", "attribute", "value", "majority"):
                d.add_column(col, overflow="fold")
            for x in res.deviations:
                d.add_row(x.node, x.attribute, "-" if x.actual is None else str(x.actual),
                          str(x.expected))
            con.print(d)
        for p, e in skipped:
            con.print(f"[red]unreadable:[/] {p}: {e}", highlight=False)
        if write_profile:
            con.print(f"profile written to {write_profile}", highlight=False)
    return 1 if res.deviations or skipped else 0


@click.command("topo")
@click.option("--from", "from_file", metavar="FILE",
              help="nvidia-smi topo -m capture, NCCL topology XML, hwloc XML or minutiae JSON.")
@click.option("--sysfs-root", metavar="DIR", help="Read sysfs from DIR instead of /sys.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object (see DESIGN.md).")
@click.option("--plan", is_flag=True, help="Print the binding plan for the local ranks.")
@click.option("--ranks", type=int, help="Local ranks for --plan (default: one per GPU).")
@click.option("--reserve-cores", metavar="LIST",
              help="CPUs kept for system services, e.g. 0,52 or none "
                   "(default: the first CPU of each NUMA node and its sibling).")
@click.option("--format", "fmt", type=click.Choice(_FORMATS), default="exports", show_default=True,
              help="Plan output format.")
@click.option("--transport", type=click.Choice(["auto", "ib", "efa", "tcp"]), default="auto",
              show_default=True,
              help="--plan: network transport (auto: from the NIC kinds the source states).")
@click.option("--per-rank-nics", is_flag=True,
              help="--plan: give each rank only its own nearest NIC(s) (disables NCCL's PXN / "
                   "cross-rail paths; default: one NIC list for the job).")
@click.option("--check", is_flag=True, help="Check the node; exit code is the Nagios status.")
@click.option("--expect", metavar="PROFILE", help="Profile TOML for --check (hand-written or learned).")
@click.option("--learn", "learn_dir", metavar="DIR",
              help="Learn the golden configuration from a directory of captures.")
@click.option("--write-profile", metavar="F", help="With --learn: write the learned profile TOML to F.")
@click.option("--min-support", type=float, default=0.5, show_default=True,
              help="With --learn: majority fraction an attribute needs to enter the profile.")
@click.option("--workers", type=int, default=0, show_default=True,
              help="With --learn: processes reading captures (0: up to 4, one per CPU).")
def command(from_file: str | None, sysfs_root: str | None, as_json: bool, plan: bool,
            ranks: int | None, reserve_cores: str | None, fmt: str, transport: str,
            per_rank_nics: bool, check: bool,
            expect: str | None, learn_dir: str | None, write_profile: str | None,
            min_support: float, workers: int) -> int:
    """Topology: GPU↔NUMA↔NIC↔NVMe placement, binding plan, checks, learned fleet profile."""
    if learn_dir is not None:
        return _learn(learn_dir, as_json, write_profile, min_support, workers)
    if write_profile:
        raise ConfigError("--write-profile needs --learn DIR")
    topo = _load(from_file, sysfs_root)
    if check or expect:
        from minutiae.analyses.topology.check import check_topology
        from minutiae.analyses.topology.profile import profile_from_toml
        from minutiae.analyses.topology.read_sysfs import read_text

        profile = None
        if expect:
            profile = profile_from_toml(read_text(expect, "profile"), expect)
        result = check_topology(topo, profile)
        if as_json:
            click.echo(json.dumps(result.to_json(), indent=2))
        else:
            click.echo(f"TOPOLOGY {result.status.label.upper()}: {len(result.findings)} finding(s)"
                       + (f"; {result.reason}" if result.reason else ""))
            for f in result.findings:
                click.echo(f"  [{f.severity.label}] {f.kind}: {f.message}")
        return int(result.status)
    if plan:
        from minutiae.analyses.topology.plan import Transport, make_plan
        from minutiae.analyses.topology.render import PlanFormat, render

        bp = make_plan(topo, ranks, _reserve(reserve_cores),
                       None if transport == "auto" else Transport(transport), per_rank_nics)
        if as_json:
            click.echo(json.dumps(bp.to_json(), indent=2))
        else:
            sys.stdout.write(render(bp, PlanFormat(fmt)))
        return 0
    if as_json:
        from minutiae.analyses.topology.placement import report

        click.echo(json.dumps(report(topo), indent=2))
        return 0
    _print_table(topo)
    return 0
