"""minutiae.node.sources.dcgm"""
