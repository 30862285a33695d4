"""Rule catalogs shipped as TOML data in ``minutiae/rules/catalog/``, validated at load.

Three catalogs live here (schema in docs/rules.md):

- ``kernel_log.toml``: one ``[[rule]]`` per kernel-log pattern (kind, keywords for the prefilter,
  regex with named groups, severity, action, examples and counter-examples);
- ``xid.toml`` / ``sxid.toml``: NVIDIA's XID and NVSwitch SXID catalogs mapped onto our action
  ladder (``none < restart_app < reset_gpu < reboot < inspect``).

Engine rules (thresholds, rates, counts over Findings and Observations) are loaded by
:mod:`minutiae.rules.engine.rules`. Any rule that does not validate raises ``ConfigError``
naming the catalog and the rule. Reading package data is the only I/O here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from minutiae.errors import ConfigError, InputError
from minutiae.model.findings import Finding, Scalar
from minutiae.model.vocab import LOG_KINDS, Action, Severity, Status
from minutiae.rules.tables import rule_tables

PACKAGE = "minutiae.rules"
DATA_DIR = "catalog"

#: named regex groups with a meaning of their own; every other group goes to ``attrs``
SPECIAL_GROUPS = frozenset({"pci", "code"})
#: lines after a provisional event within which an event of its kind replaces it
PROVISIONAL_LINES = 3


@dataclass(frozen=True, slots=True)
class LogRule:
    """One kernel-log rule: lines containing one of ``keywords`` and matching ``pattern`` become
    a ``LogEvent`` of ``kind``. Named groups ``pci`` and ``code`` fill those fields; every other
    named group, plus ``attrs``, goes into the event's attrs. ``catalog`` ("xid"/"sxid") means
    severity and action come from that catalog by code. ``join_back`` > 0 joins up to that many
    directly preceding lines, from one matching ``join_start``, into one event (multi-line
    messages such as the old three-line "fallen off the bus"). ``component`` is what the line is
    about (``gpu``, ``nvswitch``, ``pcie``, ``nic``): a finding with a PCI address gets the
    component ``<component>:<pci>``; None for node-wide events (MCE, OOM). A ``provisional``
    event (the AER header line) is dropped when an event of the same kind follows within
    :data:`PROVISIONAL_LINES` lines (the "PCIe Bus Error" line naming the device): one fault,
    one event, and a header the kernel printed alone (rate-limited details) still counts."""

    id: str
    kind: str
    keywords: tuple[str, ...]
    pattern: re.Pattern[str]
    severity: Severity
    action: Action
    message: str
    catalog: str | None = None
    attrs: Mapping[str, Scalar] = field(default_factory=dict)
    join_back: int = 0
    join_start: re.Pattern[str] | None = None
    examples: tuple[str, ...] = ()
    counter_examples: tuple[str, ...] = ()
    description: str = ""
    component: str | None = None
    provisional: bool = False


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """One XID/SXID code: NVIDIA's name and immediate action, mapped onto our ladder.

    ``app_caused`` entries never need more than ``restart_app`` by themselves.
    ``follows_previous`` (Xid 45) takes the severity and action of the previous XID on the same
    GPU when there is one. ``overrides`` refine severity/action from the message text (e.g.
    Xid 154 "... to 0x2 (Node Reboot Required)")."""

    code: int
    name: str
    description: str
    nvidia_action: str
    severity: Severity
    action: Action
    applies: tuple[str, ...] = ()
    app_caused: bool = False
    follows_previous: bool = False
    note: str = ""
    overrides: tuple[tuple[re.Pattern[str], Severity, Action], ...] = ()


@dataclass(frozen=True, slots=True)
class CodeCatalog:
    """A code catalog (XID or SXID) with the finding made for codes it does not list."""

    name: str
    entries: Mapping[int, CatalogEntry]
    unknown_severity: Severity
    unknown_action: Action
    unknown_message: str
    fatal_severity: Severity | None = None
    fatal_action: Action | None = None

    def get(self, code: int | None) -> CatalogEntry | None:
        return None if code is None else self.entries.get(code)


def _fail(catalog: str, rule: str, msg: str) -> ConfigError:
    return ConfigError(f"{catalog}: rule {rule!r}: {msg}")


def _read_toml(name: str, path: Path | None) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8") if path is not None else catalog_text(name)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path or name}: cannot read catalog: {exc}") from exc
    return parse_toml(text, str(path or name))


def parse_toml(text: str, where: str) -> dict[str, Any]:
    import tomllib  # here, not at module load: a cached or catalog-free run never needs it

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: invalid TOML: {exc}") from exc


def _compile(catalog: str, rid: str, pattern: Any, what: str = "pattern") -> re.Pattern[str]:
    if not isinstance(pattern, str) or not pattern:
        raise _fail(catalog, rid, f"{what} must be a non-empty string")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise _fail(catalog, rid, f"bad {what} regex: {exc}") from exc


def _enum(catalog: str, rid: str, enum: type[Severity] | type[Action], value: Any, what: str) -> Any:
    if not isinstance(value, str):
        raise _fail(catalog, rid, f"{what} must be a string")
    try:
        return enum.parse(value)
    except ValueError as exc:
        raise _fail(catalog, rid, str(exc)) from exc


def _strings(catalog: str, rid: str, value: Any, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _fail(catalog, rid, f"{what} must be a list of strings")
    return tuple(value)


_LOG_RULE_KEYS = frozenset({
    "id", "kind", "keywords", "pattern", "severity", "action", "message", "catalog", "attrs",
    "join_back", "join_start", "examples", "counter_examples", "description", "component",
    "provisional",
})
_COMPONENT = re.compile(r"[a-z][a-z0-9_]*")


def build_log_rules(doc: Mapping[str, Any], where: str = "kernel_log.toml", *,
                    complete: bool = True) -> tuple[LogRule, ...]:
    """Validate a parsed kernel-log catalog; runs every example and counter-example. A
    ``complete`` catalog (the shipped one) needs a rule for every kind; a site file does not."""
    rules = [_log_rule(where, rid, kind, item) for rid, kind, item in rule_tables(doc, where, _LOG_RULE_KEYS)]
    kinds = {r.kind for r in rules}
    missing = LOG_KINDS - kinds
    if missing and complete and doc.get("require_all_kinds", True):
        raise ConfigError(f"{where}: no rule for kinds {sorted(missing)}")
    return tuple(rules)


def _log_rule(where: str, rid: str, kind: str, item: Mapping[str, Any]) -> LogRule:
    """One ``[[rule]]`` table, validated, its examples and counter-examples run."""
    keywords = _strings(where, rid, item.get("keywords"), "keywords")
    if not keywords or any(not k for k in keywords):
        raise _fail(where, rid, "keywords must list at least one non-empty literal")
    pattern = _compile(where, rid, item.get("pattern"))
    catalog = item.get("catalog")
    if catalog not in (None, "xid", "sxid"):
        raise _fail(where, rid, f"catalog must be 'xid' or 'sxid' (got {catalog!r})")
    if catalog and "code" not in pattern.groupindex:
        raise _fail(where, rid, "a rule with a catalog needs a (?P<code>...) group")
    attrs = item.get("attrs", {})
    if not isinstance(attrs, dict) or not all(
        isinstance(v, str | int | float | bool) for v in attrs.values()
    ):
        raise _fail(where, rid, "attrs must be a table of scalars")
    join_back = item.get("join_back", 0)
    if not isinstance(join_back, int) or not 0 <= join_back <= 8:
        raise _fail(where, rid, "join_back must be an integer 0..8")
    join_start = None
    if join_back:
        join_start = _compile(where, rid, item.get("join_start"), "join_start")
    message = item.get("message", "{kind}")
    if not isinstance(message, str):
        raise _fail(where, rid, "message must be a string")
    component = item.get("component")
    if component is not None and (not isinstance(component, str) or not _COMPONENT.fullmatch(component)):
        raise _fail(where, rid, f"component must be a lower-case identifier such as 'gpu' (got {component!r})")
    provisional = item.get("provisional", False)
    if not isinstance(provisional, bool):
        raise _fail(where, rid, "provisional must be true or false")
    rule = LogRule(
        id=rid,
        kind=kind,
        keywords=keywords,
        pattern=pattern,
        severity=_enum(where, rid, Severity, item.get("severity"), "severity"),
        action=_enum(where, rid, Action, item.get("action"), "action"),
        message=message,
        catalog=catalog,
        attrs=dict(attrs),
        join_back=join_back,
        join_start=join_start,
        examples=_strings(where, rid, item.get("examples", []), "examples"),
        counter_examples=_strings(where, rid, item.get("counter_examples", []), "counter_examples"),
        description=str(item.get("description", "")),
        component=component,
        provisional=provisional,
    )
    _check_examples(where, rule)
    return rule


def _check_examples(where: str, rule: LogRule) -> None:
    """Every example must produce the rule's event, no counter-example may."""
    if not rule.examples:
        raise _fail(where, rule.id, "needs at least one example line")
    for ex in rule.examples:
        if not any(k in ex for k in rule.keywords):
            raise _fail(where, rule.id, f"example has none of the keywords: {ex!r}")
        if not rule.join_back and not rule.pattern.search(ex):
            raise _fail(where, rule.id, f"pattern does not match its example: {ex!r}")
    for cex in rule.counter_examples:
        if any(k in cex for k in rule.keywords) and rule.pattern.search(cex):
            raise _fail(where, rule.id, f"pattern matches its counter-example: {cex!r}")


_BUCKETS = frozenset({
    "IGNORE", "RESTART_APP", "RESET_GPU", "RESTART_BM", "RESTART_VM", "CONTACT_SUPPORT",
    "CHECK_MECHANICALS", "UPDATE_SWFW", "WORKFLOW_XID_45", "WORKFLOW_XID_48",
    "WORKFLOW_NVLINK_ERR", "WORKFLOW_NVLINK5_ERR", "XID_154", "CHECK_UVM", "",
})


def build_code_catalog(doc: Mapping[str, Any], name: str) -> CodeCatalog:
    """Validate a parsed XID/SXID catalog."""
    where = f"{name}.toml"
    unknown = doc.get("unknown")
    if not isinstance(unknown, dict):
        raise ConfigError(f"{where}: missing [unknown] table")
    entries: dict[int, CatalogEntry] = {}
    raw = doc.get(name)
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{where}: no [[{name}]] tables")
    for i, item in enumerate(raw):
        if not isinstance(item, dict) or not isinstance(item.get("code"), int):
            raise ConfigError(f"{where}: entry #{i} needs an integer code")
        code = item["code"]
        rid = f"{name} {code}"
        if code in entries:
            raise _fail(where, rid, "duplicate code")
        bucket = item.get("nvidia_action", "")
        if not isinstance(bucket, str) or (name == "xid" and bucket not in _BUCKETS):
            raise _fail(where, rid, f"unknown nvidia_action {bucket!r}")
        overrides = []
        for ov in item.get("overrides", []):
            if not isinstance(ov, dict):
                raise _fail(where, rid, "overrides must be tables")
            overrides.append((
                _compile(where, rid, ov.get("pattern"), "override pattern"),
                _enum(where, rid, Severity, ov.get("severity"), "override severity"),
                _enum(where, rid, Action, ov.get("action"), "override action"),
            ))
        entry = CatalogEntry(
            code=code,
            name=str(item.get("name", "")),
            description=str(item.get("description", "")),
            nvidia_action=bucket,
            severity=_enum(where, rid, Severity, item.get("severity"), "severity"),
            action=_enum(where, rid, Action, item.get("action"), "action"),
            applies=_strings(where, rid, item.get("applies", []), "applies"),
            app_caused=bool(item.get("app_caused", False)),
            follows_previous=bool(item.get("follows_previous", False)),
            note=str(item.get("note", "")),
            overrides=tuple(overrides),
        )
        if entry.app_caused and entry.action.drains:
            raise _fail(where, rid, "an application-caused code must not need more than restart_app")
        entries[code] = entry
    fatal = doc.get("fatal")
    if fatal is not None and not isinstance(fatal, dict):
        raise ConfigError(f"{where}: [fatal] must be a table")
    return CodeCatalog(
        name=name,
        entries=entries,
        unknown_severity=_enum(where, "unknown", Severity, unknown.get("severity"), "severity"),
        unknown_action=_enum(where, "unknown", Action, unknown.get("action"), "action"),
        unknown_message=str(unknown.get("message", f"unknown {name.upper()} {{code}}")),
        fatal_severity=_enum(where, "fatal", Severity, fatal.get("severity"), "severity")
        if fatal else None,
        fatal_action=_enum(where, "fatal", Action, fatal.get("action"), "action") if fatal else None,
    )


@cache
def kernel_log_rules() -> tuple[LogRule, ...]:
    """The shipped kernel-log rules (validated once per process)."""
    return build_log_rules(_read_toml("kernel_log.toml", None))


@cache
def xid_catalog() -> CodeCatalog:
    return build_code_catalog(_read_toml("xid.toml", None), "xid")


@cache
def sxid_catalog() -> CodeCatalog:
    return build_code_catalog(_read_toml("sxid.toml", None), "sxid")


def load_log_rules(path: Path) -> tuple[LogRule, ...]:
    """Site-local kernel-log rules from a file: they add to the shipped catalog, so the file
    need not cover every kind. Unreadable → ``ConfigError`` naming it (exit 3)."""
    from minutiae.inputs import read_text

    try:
        text = read_text(path, limit=4 << 20, what="rules file")
    except InputError as exc:
        raise ConfigError(f"cannot read rules file: {exc}") from None
    doc = parse_toml(text, str(path))
    if not doc.get("rule"):
        raise ConfigError(f"{path}: no [[rule]] tables")
    return build_log_rules(doc, str(path), complete=False)


def catalog_text(name: str) -> str:
    """The text of a shipped catalog file (for tests and ``--show-rules``): package data, a
    plain file beside this module (``importlib.resources`` would cost every start ~10 ms)."""
    return (Path(__file__).with_name(DATA_DIR) / name).read_text(encoding="utf-8")


def nagios_status(findings: Iterable[Finding]) -> Status:
    """Exit status by the worst finding: none/info → OK, warning → WARNING, error/critical →
    CRITICAL."""
    worst = max((f.severity for f in findings), default=Severity.INFO)
    if worst >= Severity.ERROR:
        return Status.CRITICAL
    return Status.WARNING if worst is Severity.WARNING else Status.OK
