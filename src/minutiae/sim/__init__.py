"""Fleet simulator: fleet + fault model (TOML profile) + emitters in real formats + ground truth,
and the evaluation of the detectors against that truth (``eval``; the scoring itself is
``minutiae.scoring``)."""
