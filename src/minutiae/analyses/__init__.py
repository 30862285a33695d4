"""minutiae.analyses"""
