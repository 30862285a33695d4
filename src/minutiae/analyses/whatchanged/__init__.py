"""minutiae.analyses.whatchanged"""
