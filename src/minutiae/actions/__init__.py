"""Scheduler backends (Slurm, Kubernetes, recording fake) behind one Protocol, and the budget."""
