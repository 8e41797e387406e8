"""Where diversed keeps what it makes once and reuses: `cache_root()`, the one `$DIVERSED_CACHE` rule.

`$DIVERSED_CACHE`, else `~/.cache/diversed`. Under it: converted GGUF files (`gguf/`), shipped models
(`shipped/`), built drafts (`drafts/`; `models/gguf.py`), the toy pairs (`models/toy.py`) and the file
digests (`digests.json`; `provenance.py`). It names the place only; what goes there is each user's.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$DIVERSED_CACHE``, else ``~/.cache/diversed``."""
    base = os.environ.get("DIVERSED_CACHE")
    return Path(base).expanduser() if base else Path.home() / ".cache" / "diversed"
