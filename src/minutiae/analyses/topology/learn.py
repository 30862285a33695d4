"""Learn the golden node configuration from the fleet majority and name the minority (pure).

Each node is reduced to its fingerprint (``topology_profile.fingerprint``: a dozen canonical
strings/numbers). Identical fingerprints are grouped first (a ``Counter`` over the frozen
fingerprint, so a homogeneous fleet of 10,000 nodes costs a few distinct groups), then every
attribute's majority is counted over the groups, weighted by group size.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from minutiae.analyses.topology.check import deviates
from minutiae.analyses.topology.profile import ATTRIBUTES, Profile, Value

_ABSENT = "<absent>"


@dataclass(frozen=True, slots=True)
class Deviation:
    """One node that differs from the majority on one attribute; ``support`` is the fraction
    of nodes that had the majority value ``expected``."""

    node: str
    attribute: str
    actual: Value | None
    expected: Value
    support: float
    problem: bool  # deviates in the direction that is a finding (fewer GPUs, lower rate …)


@dataclass(frozen=True, slots=True)
class LearnResult:
    """The learned profile (attributes whose majority reaches ``min_support``), the nodes that
    deviate (sorted by node then attribute), the attributes without a clear majority
    (``ambiguous``: attribute → the two leading values with their fractions), the count of
    nodes, and ``groups``: how many distinct fingerprints the fleet has."""

    profile: Profile
    deviations: tuple[Deviation, ...]
    ambiguous: dict[str, tuple[tuple[str, float], ...]]
    nodes: int
    groups: int

    def deviating_nodes(self) -> tuple[str, ...]:
        return tuple(sorted({d.node for d in self.deviations}))


def learn(fingerprints: Iterable[tuple[str, dict[str, Value]]], name: str = "learned",
          min_support: float = 0.5) -> LearnResult:
    """``fingerprints``: (node name, fingerprint) pairs. An attribute enters the profile when
    strictly more than ``min_support`` of all nodes share its value (absent counts as a value)."""
    groups: Counter[frozenset[tuple[str, Value]]] = Counter()
    members: dict[frozenset[tuple[str, Value]], list[str]] = {}
    for node, fp in fingerprints:
        key = frozenset(fp.items())
        groups[key] += 1
        members.setdefault(key, []).append(node)
    total = sum(groups.values())
    expect: dict[str, Value] = {}
    support: dict[str, float] = {}
    ambiguous: dict[str, tuple[tuple[str, float], ...]] = {}
    for attr in ATTRIBUTES:
        counts: Counter[Value] = Counter()
        for key, n in groups.items():
            val = next((v for k, v in key if k == attr), _ABSENT)
            counts[val] += n
        if not counts or set(counts) == {_ABSENT}:
            continue
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], str(kv[0])))
        value, n = ranked[0]
        frac = n / total
        if value == _ABSENT:
            continue
        if frac > min_support:
            expect[attr] = value
            support[attr] = frac
        else:
            ambiguous[attr] = tuple((str(v), c / total) for v, c in ranked[:2])
    deviations: list[Deviation] = []
    for key, nodes in members.items():
        fp = dict(key)
        for attr, expected in expect.items():
            actual = fp.get(attr)
            if actual == expected:
                continue
            problem = actual is None or deviates(attr, actual, expected)
            for node in nodes:
                deviations.append(Deviation(node, attr, actual, expected, support[attr], problem))
    deviations.sort(key=lambda d: (d.node, list(ATTRIBUTES).index(d.attribute)))
    profile = Profile(name=name, expect=expect, support=support, nodes=total)
    return LearnResult(profile=profile, deviations=tuple(deviations), ambiguous=ambiguous,
                       nodes=total, groups=len(groups))


class FingerprintCache:
    """Capture bytes → fingerprint, memoised on a BLAKE2b digest of the bytes: a fleet of
    identical nodes is parsed once. Parse errors are returned (and memoised) as strings."""

    def __init__(self) -> None:
        self._memo: dict[bytes, dict[str, Value] | str] = {}
        self.parsed = 0

    def fingerprint(self, data: bytes, where: str) -> dict[str, Value] | str:
        import hashlib

        from minutiae.analyses.topology.parse.detect import parse_topology
        from minutiae.analyses.topology.profile import fingerprint
        from minutiae.errors import InputError

        digest = hashlib.blake2b(data, digest_size=16).digest()
        hit = self._memo.get(digest)
        if hit is not None:
            return hit
        self.parsed += 1
        result: dict[str, Value] | str
        try:
            result = fingerprint(parse_topology(data, where))
        except InputError as exc:
            result = str(exc.args[0]) if exc.args else "unreadable"
        self._memo[digest] = result
        return result


# --- many captures: memoised, optionally over several processes ------------------------------

_WORKER_CACHE: FingerprintCache | None = None
_WORKER_READ: Callable[[Path], bytes] | None = None


def _work(chunk: list[tuple[str, Path]]) -> tuple[list[tuple[str, str, dict[str, Value] | str]], int]:
    global _WORKER_CACHE
    if _WORKER_CACHE is None:
        _WORKER_CACHE = FingerprintCache()
    assert _WORKER_READ is not None
    before = _WORKER_CACHE.parsed
    out = [(node, str(path), _WORKER_CACHE.fingerprint(_WORKER_READ(path), str(path)))
           for node, path in chunk]
    return out, _WORKER_CACHE.parsed - before


def fingerprint_files(items: Iterable[tuple[str, Path]], read: Callable[[Path], bytes],
                      workers: int = 1, chunk: int = 500,
                      ) -> tuple[list[tuple[str, dict[str, Value]]], list[tuple[str, str]], int]:
    """Fingerprint (node, path) pairs with ``read`` (the source's file reader, injected: this
    module does no I/O of its own). ``workers`` > 1 forks that many processes, each with its own
    digest memo. Returns the fingerprints, the unreadable (path, reason) pairs, and how many
    captures were actually parsed (memo misses)."""
    global _WORKER_READ, _WORKER_CACHE
    todo = list(items)
    _WORKER_READ = read
    _WORKER_CACHE = FingerprintCache()  # fresh per call; forked workers start from it
    if workers <= 1 or len(todo) < 2 * chunk:
        results = [_work(todo)]
    else:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        chunks = [todo[i:i + chunk] for i in range(0, len(todo), chunk)]
        with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("fork")) as ex:
            results = list(ex.map(_work, chunks))
    good: list[tuple[str, dict[str, Value]]] = []
    bad: list[tuple[str, str]] = []
    parsed = 0
    for rows, n in results:
        parsed += n
        for node, path, fp in rows:
            if isinstance(fp, str):
                bad.append((path, fp))
            else:
                good.append((node, fp))
    return good, bad, parsed
