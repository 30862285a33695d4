"""An XML declaration naming an encoding Python does not know (``encoding="bogus"``) made
ElementTree raise LookupError, which escaped the topology parsers as a traceback (seen once in
the hypothesis fuzz on a loaded machine); every XML parser refuses it with one line."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from minutiae.analyses.topology.parse.hwloc import parse_hwloc_xml
from minutiae.analyses.topology.parse.nccl import parse_nccl_topo
from minutiae.errors import ParseError
from minutiae.node.sources.nvidia_smi.parse.xml import parse_nvidia_smi_xml

DECL = b'<?xml version="1.0" encoding="bogus"?>'
PARSERS: dict[str, tuple[Callable[[bytes, str], object], bytes]] = {
    "hwloc": (parse_hwloc_xml, b'<topology><object type="Machine"/></topology>'),
    "nccl": (parse_nccl_topo, b'<system version="1"><cpu numaid="0"/></system>'),
    "nvidia-smi": (parse_nvidia_smi_xml, b"<nvidia_smi_log></nvidia_smi_log>"),
}


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_an_unknown_xml_encoding_is_a_parse_error(name: str) -> None:
    parse, body = PARSERS[name]
    with pytest.raises(ParseError, match="unknown encoding: bogus"):
        parse(DECL + body, "x.xml")
