"""Real-world kernel-log corpus (issue 16 item 1): every line in tests/data/corpus/*.jsonl, each
taken from a public issue thread or test fixture (its ``source_url``), runs through the same path as
``minutiae logscan --json`` and must give exactly its expected finding (kind, code, severity,
action), or nothing at all when ``expected`` is null.

Expectations were written from the catalog's meaning and NVIDIA's XID catalog before running
minutiae (tests/data/corpus/SOURCES.md says how). Lines minutiae does not handle yet are listed in
tests/data/corpus/known_gaps.toml with the reason; they run as ``xfail(strict=True)``, so a parser
or rule fix that makes one pass fails here until its entry is removed.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus"
GAPS = CORPUS / "known_gaps.toml"
YEAR = 2025  # syslog / dmesg -T lines carry no year; any fixed year will do for the comparison

# The public scan function moves while the package is being restructured (issue 16 layout work):
# the first importable one wins; without any, the stable CLI seam `minutiae logscan --json`.
SCAN_CANDIDATES = (
    "minutiae.node.sources.kernel_log.scan",
    "minutiae.rules.log_findings",
)

Case = dict[str, Any]
Outcome = tuple[str, int | None, str, str]


def case_id(line: str) -> str:
    return hashlib.sha1(line.encode("utf-8")).hexdigest()[:12]


def load_cases() -> list[Case]:
    cases: list[Case] = []
    for path in sorted(CORPUS.glob("*.jsonl")):
        for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if raw.strip():
                case = json.loads(raw)
                case["file"], case["lineno"], case["id"] = path.name, n, case_id(case["line"])
                cases.append(case)
    return cases


def load_gaps() -> dict[str, str]:
    data = tomllib.loads(GAPS.read_text(encoding="utf-8"))
    return {str(k): str(v) for k, v in data.get("gaps", {}).items()}


def _api_scanner() -> Callable[[str], list[dict[str, Any]]] | None:
    for name in SCAN_CANDIDATES:
        try:
            fn = importlib.import_module(name).scan_chunks
        except (ImportError, AttributeError):
            continue

        def scan(text: str, fn: Any = fn) -> list[dict[str, Any]]:
            return [f.to_json() for f in fn([text.encode("utf-8")], year=YEAR)]
        return scan
    return None


def _cli_scan(text: str) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("minutiae")), "logscan", "--json", "--year", str(YEAR), "-"],
        input=text.encode("utf-8"), capture_output=True, timeout=60, check=False)
    if proc.returncode not in (0, 1, 2):  # Nagios OK / WARNING / CRITICAL
        raise AssertionError(f"logscan exit {proc.returncode}: {proc.stderr.decode()[-500:]}")
    return [json.loads(x) for x in proc.stdout.decode().splitlines() if x.startswith("{")]


SCAN = _api_scanner() or _cli_scan


def outcomes(line: str) -> list[Outcome]:
    text = line if line.endswith("\n") else line + "\n"
    return [(f["kind"], f.get("code"), f["severity"], f["action"]) for f in SCAN(text)]


def expected_outcome(case: Case) -> list[Outcome]:
    e = case["expected"]
    return [] if e is None else [(e["kind"], e["code"], e["severity"], e["action"])]


CASES = load_cases()
KNOWN_GAPS = load_gaps()


def _params() -> Iterator[Any]:
    for case in CASES:
        marks = []
        if case["id"] in KNOWN_GAPS:
            marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_GAPS[case["id"]]))
        yield pytest.param(case, id=f"{case['file'].removesuffix('.jsonl')}-{case['id']}",
                           marks=marks)


@pytest.mark.parametrize("case", list(_params()))
def test_corpus_line(case: Case) -> None:
    got = outcomes(case["line"])
    assert got == expected_outcome(case), (
        f"{case['file']}:{case['lineno']} ({case['source_url']})\n  line: {case['line']!r}")


def test_corpus_size_sources_and_vocabulary() -> None:
    from minutiae.model.vocab import Action, Severity

    assert len(CASES) >= 300, len(CASES)
    sources = {c["source_url"].split("#")[0] for c in CASES}
    assert len(sources) >= 80, len(sources)
    assert len({c["id"] for c in CASES}) == len(CASES), "duplicate lines in the corpus"
    for c in CASES:
        assert c["source_url"].startswith("https://"), c
        if c["expected"] is not None:
            e = c["expected"]
            assert e["severity"] in {s.label for s in Severity}, c
            assert e["action"] in {a.label for a in Action}, c
            assert c["file"] == f"{e['kind']}.jsonl", c
        else:
            assert c["file"] == "benign.jsonl", c


def test_known_gaps_name_corpus_lines_with_a_reason() -> None:
    ids = {c["id"] for c in CASES}
    stale = sorted(set(KNOWN_GAPS) - ids)
    assert not stale, f"known_gaps.toml entries without a corpus line: {stale}"
    assert all(r.startswith("issue 16: ") for r in KNOWN_GAPS.values())


def test_corpus_summary(capsys: pytest.CaptureFixture[str]) -> None:
    """Expected N, found M, false warnings K — and the lines behind the gap are exactly the
    known gaps (so the summary cannot drift from the per-line xfail list)."""
    expected = found = false_warnings = 0
    failing: set[str] = set()
    for c in CASES:
        got, want = outcomes(c["line"]), expected_outcome(c)
        expected += len(want)
        found += sum(1 for g in got if g in want)
        false_warnings += sum(1 for g in got if g not in want and g[2] != "info")
        if got != want:
            failing.add(c["id"])
    with capsys.disabled():
        print(f"\ncorpus: {len(CASES)} lines, expected {expected} findings, found {found}, "
              f"false warnings {false_warnings}, known gaps {len(KNOWN_GAPS)}")
    assert failing == set(KNOWN_GAPS), {
        "fixed (remove from known_gaps.toml)": sorted(set(KNOWN_GAPS) - failing),
        "new failures": sorted(failing - set(KNOWN_GAPS))}
