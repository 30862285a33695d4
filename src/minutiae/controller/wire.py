"""The agent → controller report format (JSON), parsed and validated (pure; no pydantic here so
the agent can import it on its light path).

A report::

    {"node": "gpu001", "time": 1700000000.0, "status": "critical",
     "checks": [{"check": "gpu", "status": "critical", "reason": null, "observed": 8,
                 "findings": [{"kind": "xid", "code": 79, "severity": "critical",
                               "action": "reboot", "message": "...", "line": "...", ...}]}],
     "domains": {"rack": "r01", "leaf": "leaf3", "nvl_domain": "nvl7"},
     "agent": {"version": "0.1.0", "seq": 42}}

``findings`` may also be given at the top level. Unknown fields are ignored.

:func:`check_json` runs on every JSON body the controller accepts, *before* it is parsed: nesting
deeper than ``MAX_DEPTH`` (the parser would recurse), ``NaN``/``Infinity``, floats that overflow to
infinity and integers outside SQLite's signed 64 bits are refused with one line (HTTP 422).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from minutiae.controller.state import Report
from minutiae.errors import DataError, ValidationError
from minutiae.model import Action, Finding, Severity, Status
from minutiae.schedulers.base import validate_node

MAX_DEPTH = 32
INT64 = 1 << 63
MAX_FINDINGS = 500
MAX_TEXT = 2000
MAX_AGE_S = 30 * 86400.0
_DOMAIN_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,62}$")
_KEY_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_JOB_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}$")
#: escapes are removed first; then every other piece between quotes is outside the strings
#: (linear, C speed; one regex for escaped strings would backtrack quadratically)
_ESCAPE = re.compile(rb"\\.", re.S)
#: digits → 9, e/E → e, + kept, all else a space: a prefilter for the number regex below
_DIGITS = bytes(c if c in b"9e+" else 32 for c in
                bytes(range(256)).translate(bytes.maketrans(b"0123456789eE", b"9999999999ee")))
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
_SQUARE = bytes.maketrans(b"{}", b"[]")
#: the number tokens that may be out of range: constants, 19+ digits, 3-digit exponents
_SUSPECT = re.compile(rb"NaN|Infinity|-?[0-9]{19,}(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?"
                      rb"|-?[0-9]+(?:\.[0-9]*)?[eE]\+?[0-9]{3,}")


def check_json(raw: bytes, where: str = "body", max_depth: int = MAX_DEPTH) -> None:
    """Refuse (``DataError``) a JSON body nested deeper than ``max_depth`` or holding a number
    that is not finite or not a signed 64-bit integer, without parsing it: strings are cut out
    by one regex, then brackets are peeled innermost first (one C-speed pass per level), so a
    1 MiB body costs milliseconds whatever its shape."""
    unescaped = _ESCAPE.sub(b"", raw) if b"\\" in raw else raw
    bare = b"".join(unescaped.split(b'"')[::2])
    br = bare.translate(_SQUARE, _NOT_BRACKET)
    for _ in range(max_depth):
        if b"[]" not in br:
            break
        br = br.replace(b"[]", b"")
    # what is left is unclosed (the parser would recurse into it too) or deeper than allowed
    if b"[]" in br or br.count(b"[") > max_depth:
        raise DataError(f"JSON nested deeper than {max_depth} levels", where)
    shape = bare.translate(_DIGITS)
    if (b"N" not in bare and b"I" not in bare and b"9" * 19 not in shape
            and b"e999" not in shape and b"e+999" not in shape):
        return
    for m in _SUSPECT.finditer(bare):
        tok = m.group()
        if tok in (b"NaN", b"Infinity"):
            raise DataError(f"{tok.decode()} is not a number JSON allows here", where)
        try:
            ok = -INT64 <= int(tok) < INT64 if tok.lstrip(b"-").isdigit() else \
                math.isfinite(float(tok))
        except ValueError:
            ok = False
        if not ok:
            raise DataError(f"number {tok[:40].decode()} is out of range", where)


def validate_job(job: object) -> str:
    """A job id (Slurm ``4242``, ``4242_7``; Kubernetes ``ns/name``) safe to show and store."""
    if not isinstance(job, str) or not _JOB_RE.fullmatch(job):
        raise ValidationError(f"invalid job id {str(job)[:80]!r}")
    return job


def _text(v: Any, where: str, field: str, required: bool = False) -> str | None:
    if v is None:
        if required:
            raise DataError(f"{field} is required", where)
        return None
    if not isinstance(v, str):
        raise DataError(f"{field} must be a string", where)
    return v[:MAX_TEXT]


def finding_from_json(d: Any, where: str) -> Finding:
    if not isinstance(d, Mapping):
        raise DataError("a finding must be an object", where)
    kind = _text(d.get("kind"), where, "finding.kind", required=True)
    assert kind is not None
    try:
        sev = Severity.parse(str(d.get("severity", "info")))
        act = Action.parse(str(d.get("action", "none")))
    except ValueError as exc:
        raise DataError(str(exc), where) from None
    code = d.get("code")
    if code is not None and (isinstance(code, bool) or not isinstance(code, int)):
        raise DataError("finding.code must be an integer or null", where)
    attrs = d.get("attrs") or {}
    if not isinstance(attrs, Mapping):
        raise DataError("finding.attrs must be an object", where)
    clean = {str(k)[:64]: v for k, v in list(attrs.items())[:32]
             if v is None or isinstance(v, str | int | float | bool)}
    return Finding(kind=kind[:64], severity=sev, action=act,  # type: ignore[arg-type]
                   message=_text(d.get("message"), where, "finding.message") or "",
                   code=code, pci=_text(d.get("pci"), where, "finding.pci"),
                   component=_text(d.get("component"), where, "finding.component"),
                   line=_text(d.get("line"), where, "finding.line"),
                   rule=_text(d.get("rule"), where, "finding.rule"), attrs=clean)


def report_from_json(d: Any, received: float) -> tuple[Report, dict[str, str]]:
    """Validate one report. Its time is ``received`` (the controller's clock) minus the
    ``agent.age_s`` it waited in the agent's outbox, so neither a skewed agent clock nor a
    buffered report can pass for fresh."""
    if not isinstance(d, Mapping):
        raise DataError("a report must be a JSON object", "report")
    node = d.get("node")
    validate_node(node)  # type: ignore[arg-type]
    where = f"report from {node}"
    try:
        status = Status.parse(str(d.get("status", "unknown")))
    except ValueError as exc:
        raise DataError(str(exc), where) from None
    raw, unknown = _raw_findings(d, where)
    findings = tuple(finding_from_json(f, where) for f in raw)
    domains = _domains(d, where)
    when = _sent_at(d, received)
    return Report(node, when, status, findings, tuple(unknown)), domains  # type: ignore[arg-type]


def _raw_findings(d: Mapping[str, Any], where: str) -> tuple[list[Any], list[str]]:
    """The findings of every check and the top-level ones (at most ``MAX_FINDINGS``), and a
    line per check that could not run."""
    raw: list[Any] = []
    unknown: list[str] = []
    checks = d.get("checks") or []
    if not isinstance(checks, list):
        raise DataError("checks must be a list", where)
    for c in checks:
        if not isinstance(c, Mapping):
            raise DataError("a check must be an object", where)
        fs = c.get("findings") or []
        if not isinstance(fs, list):
            raise DataError("check.findings must be a list", where)
        raw.extend(fs)
        if str(c.get("status", "")).lower() == "unknown":
            unknown.append(f"{c.get('check')}: {c.get('reason') or 'could not run'}"[:MAX_TEXT])
    top = d.get("findings") or []
    if not isinstance(top, list):
        raise DataError("findings must be a list", where)
    raw.extend(top)
    if len(raw) > MAX_FINDINGS:
        raise DataError(f"{len(raw)} findings (at most {MAX_FINDINGS} per report)", where)
    return raw, unknown


def _domains(d: Mapping[str, Any], where: str) -> dict[str, str]:
    domains_in = d.get("domains") or {}
    if not isinstance(domains_in, Mapping):
        raise DataError("domains must be an object", where)
    domains: dict[str, str] = {}
    for k, v in domains_in.items():
        if not isinstance(v, str) or not _DOMAIN_RE.fullmatch(v) or not _DOMAIN_RE.fullmatch(k):
            raise ValidationError(f"{where}: invalid failure domain {k!r}={v!r}")
        domains[k] = v
    return domains


def report_key(d: Mapping[str, Any]) -> str | None:
    """The report's idempotency key (``agent.id``, set once by the agent when it made the
    report and kept through its outbox and retries), or None (an old agent, or not a short
    token)."""
    agent = d.get("agent")
    key = agent.get("id") if isinstance(agent, Mapping) else None
    return key if isinstance(key, str) and _KEY_RE.fullmatch(key) else None


def _sent_at(d: Mapping[str, Any], received: float) -> float:
    """``received`` less the time the report waited in the agent's outbox (capped)."""
    agent = d.get("agent")
    if isinstance(agent, Mapping):
        age = agent.get("age_s")
        if isinstance(age, int | float) and not isinstance(age, bool) and age == age and age > 0:
            return received - min(float(age), MAX_AGE_S)
    return received
