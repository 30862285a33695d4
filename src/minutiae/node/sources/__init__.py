"""minutiae.node.sources"""
