"""minutiae.testing.synth"""
