"""xid.toml agrees with NVIDIA's catalog read in place (../shared/reference/xid_catalog), every
code is mapped onto the action ladder, and the XID-specific finding semantics hold."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from minutiae.errors import ConfigError
from minutiae.model import Action, Severity
from minutiae.node.sources.kernel_log.parse import parse_text
from minutiae.rules.log_findings import findings_from_events
from minutiae.rules.logs import build_code_catalog, parse_toml, sxid_catalog, xid_catalog

# NVIDIA's resolution bucket -> the action ladder (docs/rules.md); None: per-code workflow
BUCKET_ACTION = {
    "IGNORE": Action.NONE, "RESTART_APP": Action.RESTART_APP, "RESET_GPU": Action.RESET_GPU,
    "RESTART_BM": Action.REBOOT, "RESTART_VM": Action.REBOOT, "CONTACT_SUPPORT": Action.INSPECT,
    "CHECK_MECHANICALS": Action.INSPECT, "UPDATE_SWFW": Action.NONE,
    "WORKFLOW_XID_48": Action.RESET_GPU, "WORKFLOW_NVLINK_ERR": Action.RESET_GPU,
    "WORKFLOW_NVLINK5_ERR": Action.RESET_GPU, "XID_154": Action.NONE, "CHECK_UVM": Action.NONE,
    "WORKFLOW_XID_45": Action.RESTART_APP,
}


def psv_rows(reference: Path) -> list[list[str]]:
    path = reference / "xid_catalog" / "nvidia_xid_catalog_ampere_plus.psv"
    if not path.exists():
        pytest.skip(f"missing {path}")
    lines = [ln.rstrip("\n") for ln in path.read_text(encoding="utf-8").splitlines()]
    rows = [ln.split("|") for ln in lines if ln and not ln.startswith("#")]
    assert rows[0][:3] == ["code", "mnemonic", "description"]
    return rows[1:]


def test_every_catalog_code_is_present_and_agrees(reference):
    cat = xid_catalog()
    rows = psv_rows(reference)
    assert len(rows) == 172
    codes = {int(r[0]) for r in rows}
    assert codes == set(cat.entries)
    for r in rows:
        e = cat.entries[int(r[0])]
        assert e.name == r[1], r[0]
        assert e.description == r[2], r[0]
        applies = tuple(g for g, v in zip(("A100", "H100", "B100", "GB200"), r[3:7], strict=True) if v == "YES")
        assert e.applies == applies, r[0]
        assert e.nvidia_action == r[7], r[0]
        want = BUCKET_ACTION.get(r[7])
        if want is not None and not e.app_caused:
            assert e.action == want, (r[0], r[7], e.action)
        if e.app_caused:
            assert not e.action.drains


def test_application_caused_codes_from_the_notes(reference):
    notes = (reference / "xid_catalog" / "nvidia_xid_catalog_notes.md").read_text(encoding="utf-8")
    app = {int(m.group(1)) for m in re.finditer(r"^\| (\d+) \| [^|]+ \| SW \(app\)", notes, re.M)}
    assert app == {13, 31, 43, 137}
    cat = xid_catalog()
    for code in app | {45}:
        assert cat.entries[code].app_caused and not cat.entries[code].action.drains
    assert cat.entries[45].follows_previous


def test_key_codes_map_as_nvidia_says():
    cat = xid_catalog()
    assert cat.entries[79].action is Action.REBOOT and cat.entries[79].severity is Severity.CRITICAL
    assert cat.entries[48].action is Action.RESET_GPU
    assert cat.entries[119].action is Action.RESET_GPU
    assert cat.entries[63].action is Action.NONE
    assert cat.entries[54].action is Action.INSPECT  # CHECK_MECHANICALS


def findings(text):
    return list(findings_from_events(parse_text(text)))


def test_xid45_follows_the_previous_xid_on_that_gpu():
    f = findings(
        "[ 1.0] NVRM: Xid (PCI:0000:44:00): 48, pid=1, name=python, An uncorrectable double bit error\n"
        "[ 1.1] NVRM: Xid (PCI:0000:44:00): 45, pid=1, name=python, Ch 00000008\n"
        "[ 1.2] NVRM: Xid (PCI:0000:9b:00): 45, pid=2, name=python, Ch 00000009\n"
        "[ 1.3] NVRM: Xid (PCI:0000:9b:00): 13, pid=2, name=python, Graphics Exception\n")
    dbe, follows, solo, app = f
    assert (follows.severity, follows.action) == (dbe.severity, dbe.action) == (Severity.ERROR, Action.RESET_GPU)
    assert follows.attrs["follows"] == 48 and follows.message.endswith("follows Xid 48")
    assert solo.action is Action.RESTART_APP and solo.attrs["solo"] is True
    assert not solo.action.drains and not app.action.drains


def test_xid45_after_a_long_gap_is_solo():
    f = findings(
        "[Sun Feb 23 16:00:00 2025] NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus.\n"
        "[Sun Feb 23 17:00:00 2025] NVRM: Xid (PCI:0000:44:00): 45, pid=1, Ch 00000008\n")
    assert f[0].action is Action.REBOOT and f[1].action is Action.RESTART_APP


def test_unknown_xid_is_a_finding_not_a_crash():
    (f,) = findings("NVRM: Xid (PCI:0000:44:00): 999, pid=1, something new\n")
    assert f.code == 999 and f.message.startswith("unknown XID 999 on GPU 0000:44:00.0")
    assert f.severity is Severity.WARNING and f.action is Action.NONE
    assert f.attrs["unknown_code"] is True


def test_xid154_names_the_recovery_action():
    (f,) = findings("NVRM: Xid (PCI:0000:1b:00): 154, GPU recovery action changed from 0x0 (None) "
                    "to 0x2 (Node Reboot Required)\n")
    assert f.action is Action.REBOOT
    (g,) = findings("NVRM: Xid (PCI:0000:1b:00): 154, GPU recovery action changed from 0x1 (GPU Reset "
                    "Required) to 0x0 (None)\n")
    assert g.action is Action.NONE


def test_nvlink5_nonfatal_is_not_drained():
    fatal, nonfatal = findings(
        "NVRM: Xid (PCI:0000:1b:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 08 (0x0 0x0)\n"
        "NVRM: Xid (PCI:0000:1b:00): 149, NETIR_BER_EVENT Nonfatal XC0 i0 Link 08 (0x0 0x0)\n")
    assert fatal.action is Action.RESET_GPU and nonfatal.action is Action.NONE


def test_real_xid_findings_carry_catalog_names(realdata):
    path = realdata / "kernel_logs/gpud/components_query_log_tail__dmesg.0.log"
    f = [x for x in findings_from_events(parse_text(path.read_text())) if x.kind == "xid"]
    assert [(x.code, x.action.label) for x in f[:3]] == [(48, "reset_gpu"), (63, "none"), (94, "restart_app")]
    assert f[0].message == "Xid 48 (ROBUST_CHANNEL_GPU_ECC_DBE) on GPU 0000:19:00.0"
    assert f[0].component == "gpu:0000:19:00.0" and f[0].rule == "xid"


def test_sxid12028_agrees_with_reference(reference):
    path = reference / "xid_catalog" / "sxid12028_facts_gpud338.txt"
    if not path.exists():
        pytest.skip(f"missing {path}")
    facts = path.read_text(encoding="utf-8")
    e = sxid_catalog().entries[12028]
    assert f"SXid 12028 name: {e.name}" in facts
    assert f"recovery: {e.nvidia_action}." in facts
    assert e.description.split(".")[0] in facts
    assert e.action.drains  # NVLink traffic stalls: restart the system


def test_sxid_lines_fatal_nonfatal_detail_unknown():
    f = findings(
        "[6781753.400584] nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 48 LTSSM Fault Up\n"
        "[6781753.404848] nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 20034, Severity 1 Engine instance 60 Sub-engine instance 00\n"
        "<12>[38889.018130] nvidia-nvswitch0: SXid (PCI:0000:06:00.0): 20009, Non-fatal, Link 04 RX Short Error Rate\n"
        "[ 1.0] nvidia-nvswitch0: SXid (PCI:0000:06:00.0): 19999, Fatal, Link 1 new thing\n")
    assert [(x.code, x.severity.label, x.action.label) for x in f] == [
        (20034, "critical", "reboot"), (20034, "info", "none"), (20009, "warning", "none"),
        (19999, "critical", "reboot")]
    assert f[0].attrs["link"] == "48" and f[0].component == "nvswitch:0000:06:00.0"


@pytest.mark.parametrize("doc, needle", [
    ("[[xid]]\ncode = 1\nseverity='info'\naction='none'", "[unknown]"),
    ("[unknown]\nseverity='info'\naction='none'\n[[xid]]\ncode = 1\nseverity='loud'\naction='none'", "xid 1"),
    ("[unknown]\nseverity='info'\naction='none'\n[[xid]]\ncode = 13\nseverity='info'\naction='reboot'\napp_caused=true",
     "application-caused"),
    ("[unknown]\nseverity='info'\naction='none'\n[[xid]]\ncode = 2\nnvidia_action='PRAY'\nseverity='info'\naction='none'",
     "PRAY"),
])
def test_bad_catalog_raises_config_error(doc, needle):
    with pytest.raises(ConfigError) as exc:
        build_code_catalog(parse_toml(doc, "xid.toml"), "xid")
    assert needle in str(exc.value)


@pytest.mark.parametrize("line, action", [
    # forms seen in real logs (driver 570+): "(OS Reboot)", "(PF FLR)"
    ("NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (OS Reboot)", Action.REBOOT),
    ("NVRM: Xid (PCI:0000:0d:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (PF FLR)", Action.RESET_GPU),
    ("NVRM: Xid (PCI:0008:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)", Action.RESET_GPU),
])
def test_xid154_real_forms(line, action):
    (f,) = findings(line + "\n")
    assert f.action is action


def test_xid45_names_its_cause_in_newer_drivers():
    # real lines (NVIDIA/open-gpu-kernel-modules#1150): the cause is on another GPU's stream
    f = findings(
        "kernel: NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 149\n"
        "kernel: NVRM: Xid (PCI:0000:ed:00): 45, pid=1818992, name=python3, Ch 0000000c caused by previous Xid 145\n"
        "kernel: NVRM: Xid (PCI:0000:97:00): 45, pid=1818987, name=python3, Ch 00000004\n")
    assert [(x.attrs.get("follows"), x.action) for x in f] == [
        (149, Action.RESET_GPU), (145, Action.RESET_GPU), (None, Action.RESTART_APP)]
    assert f[0].message.endswith("follows Xid 149") and f[2].attrs["solo"] is True
