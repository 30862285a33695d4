"""Job-side step timing: ``from minutiae.timing import StepTimer`` (standard library only)."""

from minutiae.timing.timer import StepTimer

__all__ = ["StepTimer"]
