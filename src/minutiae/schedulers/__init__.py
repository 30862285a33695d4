"""minutiae.schedulers"""
