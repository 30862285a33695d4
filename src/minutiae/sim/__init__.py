"""minutiae.sim"""
