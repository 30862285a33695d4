"""minutiae.node.sources.nvidia_smi.parse"""
