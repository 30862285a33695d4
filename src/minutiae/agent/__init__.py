"""minutiae.agent"""
