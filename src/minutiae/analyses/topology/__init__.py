"""minutiae.analyses.topology.placement"""
