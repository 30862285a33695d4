"""minutiae.analyses.slownodes.analysis"""
