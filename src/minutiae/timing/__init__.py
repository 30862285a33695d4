"""minutiae.timing"""
