"""Training logs people already have, read into the straggler and job-level frames.

``parse_log(data, where)`` reads one file, ``join(logs)`` several of one job, ``per_rank(log)``
gives the per-rank long table ``analyses.stragglers.prep`` takes (empty when the log only has
the job's step times). See README.md for the formats and how to add one.
"""

from minutiae.analyses.stragglers.formats.parse import join, parse_log
from minutiae.analyses.stragglers.formats.types import Evidence, Skipped, TrainLog
from minutiae.analyses.stragglers.formats.view import describe, per_rank, refusal

__all__ = ["Evidence", "Skipped", "TrainLog", "describe", "join", "parse_log", "per_rank",
           "refusal"]
