"""minutiae.rules"""
