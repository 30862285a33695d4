"""minutiae.rules.engine"""
