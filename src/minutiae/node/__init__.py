"""minutiae.node"""
