"""Fleet simulator: fleet + fault model (TOML profile) + emitters in real formats + ground truth,
and the scoring of detectors against that truth (``score``, ``evaluate``)."""
