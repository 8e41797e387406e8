"""Models: loading a target/draft pair (Hub, local, GGUF) and its settings, the DIVERSED weight head,
real weights from registry packages, and the toy pair with its corpus. Does not decode.

May import: decoding, files, config; tests/test_structure.py's MAY_IMPORT.
"""
