"""Sweeps: the methods and their knobs, the plugins that register more (methods and tasks, loaded before
Hydra composes), what a method's path knobs load (resources: heads, drafts, a plugin's files),
evaluate's settings, the grid and the settings that key its points, one task decoded
(`point.decode_task`, which evaluate, bench, drafts and the toy build call), one point scored and timed,
the grid's records on disk (results) and to the loggers, the checks made before weights load
(preflight), time measurement and the interval statistics (`intervals`, which the analysis uses too).
`diversed.evaluate` runs a sweep.

May import: decoding, files, config, models, tasks; tests/test_structure.py's MAY_IMPORT.
"""
