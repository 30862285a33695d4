"""minutiae.node.sources.pcie"""
