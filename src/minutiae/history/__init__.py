"""Run history: one record per job run (throughput, signature, node set, software stack), the
CSV/Parquet row normaliser, the SQLite store (tables ``runs_*``) and input hygiene (duplicates,
signatures seen once, missing versions, clock skew)."""

from minutiae.history.record import STACK_KEYS, Metric, RunRecord

__all__ = ["STACK_KEYS", "Metric", "RunRecord"]
