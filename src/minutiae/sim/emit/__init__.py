"""minutiae.sim.emit"""
