"""perfquery: InfiniBand port counters from ``perfquery -x`` / ``perfquery -e -x`` text."""
