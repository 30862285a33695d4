"""minutiae.sim.eval.detectors"""
