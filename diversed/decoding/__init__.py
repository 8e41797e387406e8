"""Decoding: the speculative engine (draft, verify against v = w·p + (1 − w)·q, accept), its
forward path, verifiers and baseline rules, statistics, stopping, and the autoregressive and
transformers references. Knows nothing of tasks, files or training.
"""
