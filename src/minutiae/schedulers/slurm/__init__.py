"""minutiae.schedulers.slurm"""
