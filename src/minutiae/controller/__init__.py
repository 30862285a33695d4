"""minutiae.controller"""
