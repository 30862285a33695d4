"""Resource caps for tests of hostile input."""

from __future__ import annotations

import contextlib
import resource
from collections.abc import Iterator

__all__ = ["MEMORY_CAP", "memory_cap"]

#: the address space a hostile-input test may use: an unbounded read then fails the test with
#: MemoryError instead of taking the machine
MEMORY_CAP = 8 << 30


@contextlib.contextmanager
def memory_cap(limit: int = MEMORY_CAP) -> Iterator[None]:
    """Cap this process's address space at ``limit`` bytes for the block (restored after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
