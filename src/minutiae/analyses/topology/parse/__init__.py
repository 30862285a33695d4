"""Topology capture parsers (pure): one module per format, ``detect`` picks one."""

from minutiae.analyses.topology.parse.detect import (
    TopoFormat,
    detect_format,
    merge_matrix,
    parse_topology,
)

__all__ = ["TopoFormat", "detect_format", "merge_matrix", "parse_topology"]
