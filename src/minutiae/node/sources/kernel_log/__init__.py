"""minutiae.node.sources.kernel_log"""
