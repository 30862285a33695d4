"""minutiae.parsers"""
