"""Sweeps: the methods and their knobs, the grid and the settings that key its points, one point
decoded, scored and timed, the grid's records on disk (results), the checks made before weights
load (preflight), and time measurement. `diversed.evaluate` runs a sweep.
"""
