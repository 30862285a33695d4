"""minutiae.analyses.regress.detect"""
