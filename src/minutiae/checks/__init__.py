"""minutiae.checks"""
