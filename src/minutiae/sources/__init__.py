"""minutiae.sources"""
