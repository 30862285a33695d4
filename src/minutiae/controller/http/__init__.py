"""minutiae.controller.http"""
