"""minutiae: keeps GPU supercomputers healthy and fast.

See docs/architecture.md for the map of the package.
"""

__version__ = "0.1.0"
