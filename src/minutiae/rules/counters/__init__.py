"""minutiae.rules.counters"""
