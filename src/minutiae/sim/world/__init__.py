"""minutiae.sim.world"""
