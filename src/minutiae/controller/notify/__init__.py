"""minutiae.controller.notify"""
