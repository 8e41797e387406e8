"""Decoding: the speculative engine (draft, verify against v = w·p + (1 − w)·q, accept), its
forward path, verifiers and baseline rules, statistics, stopping, the autoregressive, transformers
and llama.cpp references, and a meter of each model's forwards. Knows nothing of tasks, files or
training.

May import: nothing of the package (but `diversed.errors`); tests/test_structure.py's MAY_IMPORT.
"""
