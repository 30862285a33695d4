"""Slow GPUs, nodes and links from passive telemetry, against their peers (see ``analysis``)."""

from minutiae.analyses.slownodes.analysis import analyse_telemetry, detect_dataset
from minutiae.analyses.slownodes.core import SlowFinding, SlowOptions, SlowReport

__all__ = ["SlowFinding", "SlowOptions", "SlowReport", "analyse_telemetry", "detect_dataset"]
