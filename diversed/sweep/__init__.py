"""Sweeps: the methods and their knobs, the grid's records on disk (results), the checks made
before weights load (preflight), and time measurement. `diversed.evaluate` runs a sweep.
"""
