"""minutiae.analyses.stragglers.analysis"""
