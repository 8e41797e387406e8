"""Whether the Hugging Face Hub may and can be reached: one offline rule and one probe.

Models (`pair.py`) and datasets (`tasks/data.py`) both ask here before touching the network, so
an offline machine fails within seconds with a message naming the local option to set, instead
of waiting on the libraries' retries.

- The rule: the environment forbids the Hub when any of HF_HUB_OFFLINE, TRANSFORMERS_OFFLINE or
  HF_DATASETS_OFFLINE is truthy (1, true, yes, on): whatever is then loaded must come from local
  files or the local Hugging Face cache.
- The probe: one TCP connection to the Hub's host (HF_ENDPOINT, default huggingface.co:443),
  given up after `PROBE_TIMEOUT_S` seconds, in a daemon thread so that a slow DNS lookup cannot
  stretch the wait.

It does not download anything, read the cache, or decide what to load instead.
"""

from __future__ import annotations

import os
import socket
import threading
from urllib.parse import urlparse

PROBE_TIMEOUT_S = 3.0
OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def offline_reason() -> str | None:
    """Why the environment forbids the Hub (e.g. "HF_HUB_OFFLINE=1 is set"), or None."""
    for var in OFFLINE_VARIABLES:
        if _truthy(os.environ.get(var)):
            return f"{var}={os.environ[var]} is set"
    return None


def endpoint() -> tuple[str, int]:
    """The Hub's host and port (HF_ENDPOINT, else huggingface.co:443)."""
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    return url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)


def probe(timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """None if the Hub's endpoint accepts a TCP connection within `timeout` s, else the reason."""
    host, port = endpoint()
    result: list[str | None] = []

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            result.append(None)
        except OSError as e:
            result.append(f"{host}:{port}: {e or type(e).__name__}")

    thread = threading.Thread(target=connect, daemon=True)
    thread.start()
    thread.join(timeout)
    return result[0] if result else f"{host}:{port}: no answer within {timeout:.0f}s"


def unreachable_reason(check=None) -> str | None:
    """Why the Hub cannot be used now (the offline rule first, then `check`, default `probe`), or None."""
    return offline_reason() or (check or probe)()
