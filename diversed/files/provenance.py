"""What made a result: digests of files, model directories and settings, for keying results.

A grid point's record is keyed by a fingerprint of everything that determines its output (see
`sweep.grid.settings_fingerprint`): this module supplies the digests it is built from.

- `digest(value)`: a short SHA-256 of a JSON-able value (sorted keys), e.g. a settings dict.
- `file_digest(path)`: SHA-256 of a file's bytes. Files over `FULL_HASH_BYTES` (multi-GB weight
  shards) are hashed by their size, their first and last MiB and `SAMPLES` evenly spaced MiB
  between: any fine-tune or re-quantisation changes those bytes, and an 8B checkpoint is read in
  well under a second instead of a minute. Digests are cached by (path, size, mtime) under
  `$DIVERSED_CACHE/digests.json`, so a file is read once until it changes.
- `model_digest(directory)`: the digest of a saved model's weights, configuration and tokenizer.
- `task_settings(task)`: a task's settings with digests of its examples and prompt texts.
- `machine()`: the CPU, threads, GPU, versions and load a timing was taken with (`bench.py`).

It reads files and writes its cache; it does not load models or decide what a result depends on.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import threading
from pathlib import Path
from typing import Any

from diversed.files.atomic import write_file
from diversed.files.cache import cache_root

FULL_HASH_BYTES = 1 << 30  # files up to 1 GiB are hashed whole
SAMPLES = 64  # 1 MiB samples of larger files
CHUNK = 1 << 20
MODEL_FILES = (
    "*.safetensors",
    "*.bin",
    "*.pt",
    "*.pth",
    "*.gguf",
    "*.index.json",
    "config.json",
    "generation_config.json",
    "adapter_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "*.jinja",
)
_lock = threading.Lock()


def digest(value: Any, length: int = 16) -> str:
    """SHA-256 (hex, first `length` characters) of `value` as canonical JSON."""
    blob = json.dumps(value, sort_keys=True, default=str, ensure_ascii=False).encode()
    return hashlib.sha256(blob).hexdigest()[:length]


def pair_name(target: str, draft: str) -> str:
    """A pair's default name from its models: `<target dir or Hub name>+<draft's>-<digest of both as
    given>` (configs/pair/local.yaml's `${diversed.pair_name:...}`), so that two local pairs get two
    names and two run directories (the fine-tuned drafts of two runs are both `<run>/draft`)."""
    return f"{Path(str(target)).name}+{Path(str(draft)).name}-{digest([str(target), str(draft)], 6)}"


def _cache_path() -> Path:
    return cache_root() / "digests.json"


def _read_cache() -> dict[str, str]:
    try:
        return json.loads(_cache_path().read_text())
    except (OSError, ValueError):
        return {}


def _write_cache(entries: dict[str, str]) -> None:
    try:
        write_file(
            _cache_path(), json.dumps(entries)
        )  # whole or not at all: another process may be reading it
    except OSError:  # a read-only home: digests are recomputed next time
        pass


def file_digest(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a file (sampled above `FULL_HASH_BYTES`, see the module docstring), cached."""
    path = Path(path).resolve()
    st = path.stat()
    key = f"{path}|{st.st_size}|{st.st_mtime_ns}"
    with _lock:
        cached = _read_cache().get(key)
    if cached:
        return cached
    h = hashlib.sha256()
    with open(path, "rb") as f:
        if st.st_size <= FULL_HASH_BYTES:
            for block in iter(lambda: f.read(8 * CHUNK), b""):
                h.update(block)
        else:
            h.update(f"sampled:{st.st_size}".encode())
            step = max(CHUNK, (st.st_size - CHUNK) // (SAMPLES + 1))
            for offset in [0, *range(step, st.st_size - CHUNK, step)][: SAMPLES + 1] + [st.st_size - CHUNK]:
                f.seek(offset)
                h.update(f.read(CHUNK))
    value = h.hexdigest()
    with _lock:
        entries = _read_cache()
        entries[key] = value
        _write_cache(entries)
    return value


def directory_digest(directory: str | os.PathLike[str], patterns: tuple[str, ...] = ("*",)) -> str:
    """Digest of the files of `directory` matching `patterns` (not recursive), by name and content."""
    directory = Path(directory)
    files = sorted({p for pattern in patterns for p in directory.glob(pattern) if p.is_file()})
    return digest({p.name: file_digest(p) for p in files})


def model_digest(directory: str | os.PathLike[str]) -> str:
    """Digest of a saved model directory: its weights, configuration and tokenizer files."""
    return directory_digest(directory, MODEL_FILES)


# ----------------------------------------------------------------------------- settings


def task_settings(task: Any) -> dict[str, Any]:
    """What a task contributes to a result: its settings (`Task.settings`: metric, stops, token
    limits, data source, scoring options) and digests of its examples and of the exact prompt
    texts (prompt format and few-shot examples included)."""
    return {
        **task.settings(),
        "n_loaded": len(task),
        "examples": digest(task.examples),
        "prompts": digest([task.full_prompt(e) for e in task.examples]),
    }


def machine() -> str:
    """CPU, threads, versions and load: what a timing needs next to it."""
    import torch
    import transformers

    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(
            line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")
        )
    except (OSError, StopIteration):
        pass
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    gpu = f", GPU {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""
    return (
        f"{cpu}, {os.cpu_count()} CPUs, {torch.get_num_threads()} torch threads{gpu}, "
        f"torch {torch.__version__}, transformers {transformers.__version__}, load average {load}"
    )
