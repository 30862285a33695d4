"""minutiae.node.sources.uptime"""
