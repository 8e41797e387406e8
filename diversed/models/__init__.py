"""Models: loading a target/draft pair (Hub, local, GGUF), the DIVERSED weight head, real weights
from registry packages, and the toy pair with its corpus. Does not decode.
"""
