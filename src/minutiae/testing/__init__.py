"""Fakes other code and other projects can import in their tests."""

from minutiae.testing.fakes import FakeClock

__all__ = ["FakeClock"]
