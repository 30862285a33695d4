"""minutiae.sim.eval"""
