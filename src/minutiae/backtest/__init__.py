"""minutiae.backtest"""
