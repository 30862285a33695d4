"""``nvidia-smi topo -m`` as people paste it (issue 16 item 4), and hostile masks."""

from __future__ import annotations

from pathlib import Path

import pytest

from minutiae.analyses.topology.parse.detect import parse_topology
from minutiae.cli.main import main
from minutiae.errors import ParseError
from minutiae.model.topology import NicKind, parse_hexmask

SMI = "nvidia_smi/ml-engineering"


def _text(realdata: Path) -> str:
    return (realdata / SMI / "topo_m_8xH100_nv18_numa.txt").read_text()


def _facts(text: str) -> list[tuple[int, int | None, tuple[int, ...], tuple[int, ...]]]:
    t = parse_topology(text.encode(), "paste")
    return [(g.index, g.numa, g.cpus, g.nvlink_peers) for g in t.gpus]


@pytest.mark.parametrize("dress", [
    lambda s: "$ nvidia-smi topo -m\n" + s,
    lambda s: "user@dgx01:~$ nvidia-smi topo -m\n" + s + "user@dgx01:~$ \n",
    lambda s: "[root@dgx01 ~]# nvidia-smi topo -m\n" + s,
    lambda s: "".join(f"# {ln}\n" for ln in s.splitlines()),
    lambda s: "".join(f"#{ln}\n" for ln in s.splitlines()),
    lambda s: "".join(f"> {ln}\n" for ln in s.splitlines()),
    lambda s: "# nvidia-smi topo -m\n" + "".join(f"# {ln}\n" for ln in s.splitlines()),
])
def test_prompt_and_comment_prefix_read_as_the_plain_capture(realdata: Path, dress: object) -> None:
    plain = _text(realdata)
    assert _facts(dress(plain)) == _facts(plain)  # type: ignore[operator]
    assert len(_facts(plain)) == 8


def test_headerless_paste_is_refused_never_a_made_up_gpu(realdata: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    body = "\n".join(_text(realdata).splitlines()[1:])
    with pytest.raises(ParseError, match="without its header row"):
        parse_topology(body.encode(), "x")
    f = tmp_path / "nohdr.txt"
    f.write_text(body)
    assert main(["topo", "--from", str(f)]) == 3
    err = capsys.readouterr().err
    assert "header row" in err and "Traceback" not in err


def test_partial_paste_names_the_missing_rows(realdata: Path) -> None:
    cut = "\n".join(_text(realdata).splitlines()[:5])  # header + GPU0..GPU3
    t = parse_topology(cut.encode(), "cut")
    assert t.missing[0].startswith("GPU4–7 rows missing")
    assert [g.numa for g in t.gpus] == [0, 0, 0, 0, None, None, None, None]


def test_matrix_without_legend_has_no_device_names() -> None:
    text = ("\tGPU0\tGPU1\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\n"
            "GPU0\t X \tNV4\tPIX\tSYS\t0-7\t0\n"
            "GPU1\tNV4\t X \tSYS\tPIX\t8-15\t1\n"
            "NIC0\tPIX\tSYS\t X \tSYS\nNIC1\tSYS\tPIX\tSYS\t X \n")
    t = parse_topology(text.encode(), "x")
    assert any("no NIC Legend" in m for m in t.missing)
    assert all(n.kind is NicKind.UNKNOWN for n in t.nics)


@pytest.mark.parametrize("mask", ["-1", "-5", "+f", "0x-1", "ff,-1", "zz"])
def test_negative_or_bad_hexmask_is_a_clear_error(mask: str) -> None:
    with pytest.raises(ValueError, match="hex CPU mask|bad mask"):
        parse_hexmask(mask)


@pytest.mark.parametrize("doc", [
    '<system version="1"><cpu numaid="0" affinity="-1"/></system>',
    '<?xml version="1.0"?><topology version="2.0"><object type="Machine" os_index="0" '
    'cpuset="-5"/></topology>',
])
def test_negative_mask_in_a_capture_exits_3(tmp_path: Path, doc: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "neg.xml"
    f.write_text(doc)
    assert main(["topo", "--from", str(f)]) == 3
    err = capsys.readouterr().err
    assert "not a hex CPU mask" in err and "Traceback" not in err


def test_unknown_cpu_sets_are_null_in_json(realdata: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    import json

    cut = tmp_path / "cut.txt"
    cut.write_text("\n".join(_text(realdata).splitlines()[:5]))
    assert main(["topo", "--from", str(cut), "--json"]) == 0
    gpus = json.loads(capsys.readouterr().out)["gpus"]
    assert [g["cpus"] is None for g in gpus] == [False] * 4 + [True] * 4
    assert main(["topo", "--from", str(cut), "--plan", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert [r["cpus"] is None for r in plan["ranks"]] == [False] * 4 + [True] * 4
    assert plan["env"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
