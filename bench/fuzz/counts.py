"""The fuzz/hostile-input figures for issue 16's closing note, in one table.

- every command that takes a file (the templates of tests/fuzz/test_corpus_every_command.py)
  on every hostile file of tests/fuzz/fuzz_hostile.py (2 GiB sparse file, /dev/zero, a
  directory included), each in its own child: tracebacks, hangs (the child's CPU time, an
  RLIMIT_CPU, with a wall-clock backstop), exits outside {0, 1, 3} or more than one error
  line, and the child's own peak RSS (os.wait4), the endless/huge inputs' apart (goal ≤ 300 MB);
- every file option given an unreadable input (a missing file, a directory): exit 3 with one
  line (``check``: exit 3, the source UNKNOWN in its report on stdout), counted;
- every JSON endpoint of the controller given the hostile bodies of
  tests/fuzz/test_http_json_limits.py (in process, FastAPI's TestClient): HTTP 5xx counted.

Run from the repository root: ``.venv/bin/python bench/fuzz/counts.py`` (``-j 2`` runs two
children at once; a quiet machine takes ~3 min with -j 2).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "fuzz"))

from fuzz_hostile import MAX_RSS_MB, Run, make_corpus, run_cli  # noqa: E402
from test_corpus_every_command import TEMPLATES as ALL_TEMPLATES  # noqa: E402
from test_corpus_every_command import TOPO, WRITES  # noqa: E402

#: ``serve`` would bind and serve for ever in a real child whenever its input is sound: the suite
#: runs those templates in process with the server replaced (tests/fuzz/fuzz_inproc.py)
TEMPLATES = [t for t in ALL_TEMPLATES if t[0] != "serve"]

ENDLESS = ("/dev/zero", "2 GiB sparse", "10 MB line", "deep JSON")


def _argv(template: list[str], f: Path, empty: Path) -> list[str]:
    """The template's placeholders as the suite fills them (its fixture's files beside ``empty``)."""
    base = empty.parent
    return [a.format(f=f, empty=empty, dataset=base / "dataset", out=base / "out",
                     tok=base / "tok", topo=TOPO) for a in template]


def _writes_elsewhere(template: list[str], f: Path, base: Path) -> bool:
    """A template that writes to ``{f}`` is never pointed at a device (its rename would replace
    the node): only the corpus's own files, as in the suite."""
    return any(w in template for w in WRITES) and base not in f.parents


def _runs(jobs: list[tuple[str, list[str]]], base: Path, workers: int) -> list[tuple[str, Run]]:
    def one(i: int) -> tuple[str, Run]:
        name, argv = jobs[i]
        cwd = base / f"w{i % workers}"
        cwd.mkdir(exist_ok=True)
        return name, run_cli(argv, cwd)
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(one, range(len(jobs))))


def _one_error_line(r: Run) -> bool:
    """Exit 3 and one error line (``check``: exit 3, its report on stdout says UNKNOWN)."""
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("minutiae: error")]
    return r.rc == 3 and not r.traceback and (len(lines) == 1 or r.args[0] == "check")


def _bad_exit(r: Run) -> bool:
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("minutiae: error")]
    return r.rc not in (0, 1, 3) or len(lines) > 1


def cli_counts(workers: int) -> list[str]:
    with tempfile.TemporaryDirectory() as d:
        base = Path(d)
        (base / "corpus").mkdir()
        corpus = make_corpus(base / "corpus")
        empty = base / "empty.log"
        empty.write_text("")
        (base / "tok").write_text("fuzz-token-0123456789abc\n")
        run_cli(["sim", "--nodes", "2", "--days", "0.05", "--out", str(base / "dataset"),
                 "--quiet"], base)
        jobs = [(name, _argv(t, f, empty)) for t in TEMPLATES for name, f in corpus.items()
                if not _writes_elsewhere(t, f, base)]
        t0 = time.monotonic()
        runs = _runs(jobs, base, workers)
        wall = time.monotonic() - t0
        bad = [(n, r) for n, r in runs if not r.ok()]
        peak = max(runs, key=lambda nr: nr[1].rss_mb)
        endless = [r.rss_mb for n, r in runs if n in ENDLESS]
        missing = base / "no-such-file.log"
        # a writer's missing file is a fresh state, not an unreadable input (and running it
        # would create ``missing`` for the templates after it)
        reads = [t for t in TEMPLATES if not any(w in t for w in WRITES)]
        unread = [("missing file", _argv(t, missing, empty)) for t in reads] + [
            ("directory", _argv(t, base / "corpus", empty)) for t in reads]
        uruns = _runs(unread, base, workers)
        u_ok = sum(_one_error_line(r) for _, r in uruns)
    out = [
        f"hostile files x commands: {len(runs)} cases ({len(corpus)} files x {len(TEMPLATES)} "
        f"command lines), {wall:.0f} s wall",
        f"  tracebacks {sum(r.traceback for _, r in runs)}, hangs {sum(r.hung for _, r in runs)}"
        f", exit outside 0/1/3 or > 1 error line {sum(_bad_exit(r) for _, r in runs)}, over "
        f"{MAX_RSS_MB} MB {sum(r.rss_mb > MAX_RSS_MB for _, r in runs)}",
        f"  peak RSS: max {peak[1].rss_mb:.0f} MB ({peak[0]}: {' '.join(peak[1].args[:2])}); "
        f"endless/huge inputs ({', '.join(ENDLESS)}) max {max(endless):.0f} MB "
        f"(goal <= {MAX_RSS_MB} MB)",
        f"unreadable inputs (missing file, directory) x {len(reads)} command lines: "
        f"{u_ok}/{len(uruns)} exit 3 with one error line",
    ]
    out += [f"  NOT OK {n}: {' '.join(r.args)} -> rc {r.rc}, {r.rss_mb:.0f} MB, "
            f"hung {r.hung}: {r.stderr.strip()[-160:]}" for n, r in bad]
    out += [f"  NOT exit 3 ({n}): {' '.join(r.args)} -> rc {r.rc}: {r.stderr.strip()[-160:]}"
            for n, r in uruns if not _one_error_line(r)]
    return out


def http_counts() -> list[str]:
    from fastapi.testclient import TestClient
    from test_http_json_limits import AUTH, HOSTILE, JSON_POSTS, TOKEN

    from minutiae.controller.http.api import make_app
    from minutiae.controller.policy import load_policy
    from minutiae.controller.service import Controller
    from minutiae.controller.store import Store
    from minutiae.schedulers.recording import RecordingBackend
    from minutiae.testing import FakeClock

    codes: dict[int, int] = {}
    with tempfile.TemporaryDirectory() as d:
        ctl = Controller(Store(Path(d) / "c.db"), RecordingBackend(name="slurm"), load_policy(),
                         FakeClock())
        client = TestClient(make_app(ctl, TOKEN), raise_server_exceptions=False)
        requests = [(p, body) for p in JSON_POSTS for body in HOSTILE.values()]
        requests.append(("/v1/jobs/77/tolerance", b'{"nodes":NaN}'))
        for path, body in requests:
            method = client.put if path.endswith("tolerance") else client.post
            code = method(path, content=body, headers=AUTH).status_code
            codes[code] = codes.get(code, 0) + 1
    five = sum(n for c, n in codes.items() if c >= 500)
    return [f"HTTP hostile bodies x JSON endpoints: {sum(codes.values())} requests, "
            f"{five} answered 5xx; status codes {dict(sorted(codes.items()))}"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-j", type=int, default=2, help="children at once")
    a = ap.parse_args()
    print(f"fuzz counts (load average {os.getloadavg()[0]:.1f} at start)")
    for line in [*cli_counts(a.j), *http_counts()]:
        print(line)
    print(f"(load average {os.getloadavg()[0]:.1f} at the end)")


if __name__ == "__main__":
    main()
