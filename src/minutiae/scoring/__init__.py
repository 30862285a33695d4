"""minutiae.scoring"""
