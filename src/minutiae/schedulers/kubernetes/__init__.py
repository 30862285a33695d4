"""minutiae.schedulers.kubernetes"""
