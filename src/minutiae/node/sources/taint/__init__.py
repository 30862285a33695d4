"""minutiae.node.sources.taint"""
