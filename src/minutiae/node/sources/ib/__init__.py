"""minutiae.node.sources.ib"""
