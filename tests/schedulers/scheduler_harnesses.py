"""The contract suite's harnesses, one per registered scheduler backend (``HARNESSES``): each
makes its backend through the registry and can reset the nodes, drain one as an admin would,
start a job, and run an undo hint with the scheduler's own tool. Slurm: the real slurmctld of
fixture ``slurm_conf`` (nodes gpu041-gpu064 only); Kubernetes: the real kube-apiserver of
fixture ``kubeconfig`` (Node objects, no kubelet). Adding a backend = adding its harness here."""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from dataclasses import replace
from typing import Any, Protocol

from minutiae.schedulers import make_backend
from minutiae.schedulers.base import SchedulerBackend
from minutiae.schedulers.recording import RecordingBackend
from minutiae.testing import FakeClock

NODES = [f"gpu{i:03d}" for i in range(41, 65)]  # the contract suite's Slurm range
T0 = 1_780_000_000.0
ADMIN_REASON = "admin: fan tray replaced, do not use"


class Harness(Protocol):
    name: str
    backend: SchedulerBackend

    def reset(self) -> None: ...
    def admin_drain(self, node: str) -> None: ...
    def start_job(self, nodes: list[str], tolerance: int | None = None) -> str: ...
    def run_undo(self, command: str) -> None: ...
    def close(self) -> None: ...


# -- the schedulers -----------------------------------------------------------------------------

class DryRunHarness:
    """No scheduler: only the capability and undo-hint contracts apply (it refuses to act)."""

    name = "dry-run"

    def __init__(self) -> None:
        self.backend = make_backend("dry-run")

    def reset(self) -> None:
        pass

    def admin_drain(self, node: str) -> None:
        raise AssertionError("dry-run has no scheduler to drain")

    def start_job(self, nodes: list[str], tolerance: int | None = None) -> str:
        raise AssertionError("dry-run has no scheduler to run jobs")

    def run_undo(self, command: str) -> None:
        raise AssertionError(f"dry-run: nothing to run, got {command!r}")

    def close(self) -> None:
        pass


class RecordingHarness:
    name = "recording"

    def __init__(self) -> None:
        be = make_backend("recording")
        assert isinstance(be, RecordingBackend)
        self.backend = be
        self.reset()

    def reset(self) -> None:
        self.backend.nodes.clear()
        for n in NODES:
            self.backend.add_node(n)

    def admin_drain(self, node: str) -> None:
        self.backend.admin_drain(node, ADMIN_REASON)

    def start_job(self, nodes: list[str], tolerance: int | None = None) -> str:
        for n in nodes:
            self.backend.nodes[n] = replace(self.backend.nodes[n], jobs=("77",))
        return "77"

    def run_undo(self, command: str) -> None:
        raise AssertionError(f"recording fake: nothing to run, got {command!r}")

    def close(self) -> None:
        pass


class SlurmHarness:
    name = "slurm"

    def __init__(self, conf: str) -> None:
        self.conf = conf
        self.backend = make_backend("slurm", slurm_conf=conf)
        self.jobs: list[str] = []
        self.reset()

    def _run(self, *argv: str) -> str:
        res = subprocess.run(list(argv), env={"SLURM_CONF": self.conf, "PATH": "/usr/bin:/bin:/usr/sbin:/sbin"},
                             capture_output=True, text=True, timeout=30, check=False)
        return res.stdout

    def reset(self) -> None:
        for j in self.jobs:
            self._run("scancel", j)
        self.jobs = []
        for _ in range(100):
            out = self._run("sinfo", "-h", "-N", "-n", ",".join(NODES), "-o", "%N %t")
            busy = [ln.split()[0] for ln in out.splitlines() if ln.split()[1] != "idle"]
            if not busy:
                return
            for n in busy:
                if self._run("scontrol", "show", "node", n).find("DRAIN") >= 0:
                    self._run("scontrol", "update", f"NodeName={n}", "State=RESUME")
            time.sleep(0.2)
        raise AssertionError(f"slurm nodes not idle: {busy}")

    def admin_drain(self, node: str) -> None:
        self._run("scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={ADMIN_REASON}")

    def start_job(self, nodes: list[str], tolerance: int | None = None) -> str:
        comment = () if tolerance is None else ("--comment", f"minutiae:tolerance={tolerance}")
        job = self._run("sbatch", "--parsable", "-N", str(len(nodes)), "-w", ",".join(nodes),
                        *comment, "-o", "/dev/null", "--wrap", "sleep 600").strip()
        self.jobs.append(job)
        for _ in range(100):
            if self._run("squeue", "-h", "-j", job, "-o", "%T").strip() == "RUNNING":
                return job
            time.sleep(0.1)
        raise AssertionError(f"job {job} did not start")

    def run_undo(self, command: str) -> None:
        argv = shlex.split(command)
        assert argv[0] == "scontrol", command
        res = subprocess.run(argv, env={"SLURM_CONF": self.conf, "PATH": "/usr/bin:/bin"},
                             capture_output=True, text=True, timeout=30, check=False)
        assert res.returncode == 0, res.stderr

    def close(self) -> None:
        self.reset()


class KubernetesHarness:
    name = "kubernetes"
    NS = "mk-contract"

    def __init__(self, kubeconfig: str) -> None:
        from k8s_helpers import admin, ensure_namespace

        self.kubeconfig = kubeconfig
        self.api = admin(kubeconfig)
        ensure_namespace(self.api, self.NS)
        self.backend = make_backend("kubernetes", kubeconfig=kubeconfig, clock=FakeClock(start=T0))
        self.pods: list[str] = []
        self.reset()

    def reset(self) -> None:
        from k8s_helpers import create_node, delete

        for p in self.pods:
            delete(self.api, f"/api/v1/namespaces/{self.NS}/pods/{p}")
        self.pods = []
        for n in NODES:
            create_node(self.api, n)

    def admin_drain(self, node: str) -> None:
        from k8s_helpers import admin_cordon

        admin_cordon(self.api, node)

    def start_job(self, nodes: list[str], tolerance: int | None = None) -> str:
        from k8s_helpers import create_pod

        for i, n in enumerate(nodes):
            create_pod(self.api, self.NS, f"train-{i}", n, {"job": "train"}, job="train")
            self.pods.append(f"train-{i}")
        return f"{self.NS}/Job/train"

    def run_undo(self, command: str) -> None:
        """The hint is ``kubectl …`` lines joined by `` && `` (run in turn, as a shell would)."""
        env = {"KUBECONFIG": self.kubeconfig, "PATH": "/usr/bin:/bin",
               "HOME": os.environ.get("HOME", "/tmp")}
        for part in command.split(" && "):
            argv = shlex.split(part)
            assert argv[0] == "kubectl", command
            res = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30,
                                 check=False)
            assert res.returncode == 0, res.stderr

    def close(self) -> None:
        from k8s_helpers import delete

        self.reset()
        for n in NODES:
            delete(self.api, f"/api/v1/nodes/{n}")
        self.api.close()
        self.backend.close()


#: one harness per registered backend (test_every_registered_backend_has_a_harness)
HARNESSES: dict[str, Any] = {
    "dry-run": lambda request: DryRunHarness(),
    "recording": lambda request: RecordingHarness(),
    "slurm": lambda request: SlurmHarness(request.getfixturevalue("slurm_conf")),
    "kubernetes": lambda request: KubernetesHarness(request.getfixturevalue("kubeconfig")),
}
#: the backends that act (the scenarios below drain and resume through them)
ACTING = ["recording", "slurm", "kubernetes"]
