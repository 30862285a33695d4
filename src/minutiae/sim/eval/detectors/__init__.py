"""The eval detectors: one module per detector, each registering itself with one
``@register(...)`` line (README.md; the contract is in ``base.py``)."""

from minutiae.sim.eval.detectors.base import (
    PARTS,
    REGISTRY,
    Context,
    Detector,
    DetectorResult,
    Failure,
    detectors,
    register,
)

__all__ = ["PARTS", "REGISTRY", "Context", "Detector", "DetectorResult", "Failure", "detectors", "register"]
