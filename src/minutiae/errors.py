"""Every error minutiae raises on purpose, in one place.

Hierarchy::

    MinutiaeError                  base; the CLI turns any of these into a clear message
    ├── InputError                 bad input we were asked to read (carries the path or source)
    │   ├── ParseError             text/bytes that do not have the expected format
    │   └── DataError              well-formed but unusable data (empty, missing columns, NaN…)
    ├── SourceUnavailable          a source could not be read (no NVML, missing sysfs, service down):
    │                              checks built on it report UNKNOWN, never OK
    ├── ConfigError                a rule catalog, policy, profile or flag that does not validate
    ├── ValidationError            a value that would reach a command line, scheduler reason or
    │                              URL and is not safe (node name, reason text)
    ├── BackendError               a scheduler backend (Slurm, Kubernetes) refused or failed
    │   └── BackendUnavailable     the scheduler could not be reached at all
    ├── StoreError                 the controller's SQLite store failed
    └── AuthError                  a request without a valid token
"""

from __future__ import annotations


class MinutiaeError(Exception):
    """Base of all deliberate minutiae errors."""


class InputError(MinutiaeError):
    """Bad input; ``where`` names the file, URL or stream."""

    def __init__(self, message: str, where: str | None = None) -> None:
        self.where = where
        super().__init__(f"{where}: {message}" if where else message)


class ParseError(InputError):
    """Input that does not have the expected format."""


class DataError(InputError):
    """Well-formed input that cannot be used as it is."""


class SourceUnavailable(MinutiaeError):
    """A source could not be read; the reason is user-facing (e.g. NVML Shared Library Not Found)."""

    def __init__(self, source: str, reason: str) -> None:
        self.source = source
        self.reason = reason
        super().__init__(f"{source}: {reason}")


class ConfigError(MinutiaeError):
    """A catalog, policy, profile or option that does not validate."""


class ValidationError(MinutiaeError):
    """A value that is not safe to pass to a command line or a scheduler."""


class BackendError(MinutiaeError):
    """A scheduler backend refused or failed an operation."""


class BackendUnavailable(BackendError):
    """The scheduler could not be reached."""


class StoreError(MinutiaeError):
    """The controller store failed."""


class AuthError(MinutiaeError):
    """A request without a valid token."""
