"""Reads a captured ``nvidia-smi -q -x`` (XML) or ``nvidia-smi -q`` (text) file."""

from __future__ import annotations

from pathlib import Path

from minutiae.errors import InputError
from minutiae.model.snapshot import Snapshot

MAX_BYTES = 64 * 1024 * 1024


def read_nvidia_smi_file(path: Path) -> Snapshot:
    """Parse ``path`` as XML when it starts with ``<`` (after whitespace/BOM), else as text.
    Raises ``InputError``/``ParseError`` naming the path."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", str(path)) from None
    if len(data) > MAX_BYTES:
        raise InputError(f"larger than {MAX_BYTES} bytes; not an nvidia-smi capture", str(path))
    if data.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"<"):
        from minutiae.node.sources.nvidia_smi.parse.xml import parse_nvidia_smi_xml

        return parse_nvidia_smi_xml(data, str(path))
    from minutiae.node.sources.nvidia_smi.parse.text import parse_nvidia_smi_text

    return parse_nvidia_smi_text(data.decode("utf-8", errors="replace"), str(path))


def read_nvlink_status_file(path: Path) -> Snapshot:
    """A captured ``nvidia-smi nvlink --status``. Raises ``InputError`` naming the path."""
    from minutiae.node.sources.nvidia_smi.parse.nvlink import parse_nvlink_status

    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_BYTES)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", str(path)) from None
    return parse_nvlink_status(data.decode("utf-8", errors="replace"), str(path))
