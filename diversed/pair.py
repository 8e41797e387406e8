"""Load a target/draft pair (Hub ids or local directories) with one shared tokenizer.

`load_pair` is what every `configs/pair/*.yaml` instantiates. It loads both models frozen in
eval mode, checks that target and draft tokenize identically, and gives the tokenizer left
padding and a pad token. A name that is not a local directory is looked up in the local
Hugging Face cache; if it is not there and the Hub cannot be reached (HF_HUB_OFFLINE=1, or
huggingface.co:443 does not answer within 3 s) it fails at once with a message saying how to
point the config at local copies, instead of waiting on retries.
"""

from __future__ import annotations

import os
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import torch

PROBE_TIMEOUT_S = 3.0

# ----------------------------------------------------------------------------- the pair


@dataclass
class Pair:
    """A frozen target p, a frozen draft q and their shared tokenizer."""

    target: Any
    draft: Any
    tokenizer: Any
    name: str
    target_name: str
    draft_name: str

    @property
    def device(self) -> torch.device:
        return next(self.target.parameters()).device


# ----------------------------------------------------------------------------- offline fail-fast


class HubUnavailableError(OSError):
    """A model id is neither a local directory nor cached, and the Hub cannot be reached."""


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def hub_offline_by_env() -> str | None:
    """The reason the environment forbids the Hub, if it does."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if _truthy(os.environ.get(var)):
            return f"{var}={os.environ[var]} is set"
    return None


def probe_hub(timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """None if the Hub endpoint accepts a TCP connection within `timeout` s, else the reason.

    Runs in a daemon thread so that a slow DNS lookup cannot stretch the wait past `timeout`.
    """
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)
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


def in_hf_cache(repo_id: str, revision: str | None = None) -> bool:
    """Whether the local Hugging Face cache holds `repo_id`'s config.json."""
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(repo_id, "config.json", revision=revision), str)
    except Exception:  # an id that is not a valid repo name, an unreadable cache, ...
        return False


def resolve(name: str, role: str, *, revision: str | None = None, probe=None) -> dict[str, Any]:
    """Extra `from_pretrained` kwargs for `name`, or HubUnavailableError right away.

    `probe` returns None when the Hub is reachable, else a reason (default: `probe_hub`).
    """
    if Path(name).expanduser().is_dir():
        return {}
    if name.startswith(("/", ".", "~")) or name.count("/") > 1:  # a path, not an "org/name" id
        raise FileNotFoundError(f"the {role} model directory {name!r} does not exist")
    cached = in_hf_cache(name, revision)
    reason = hub_offline_by_env() or (probe or probe_hub)()
    if reason is None:
        return {}
    if cached:  # offline but cached: load from the cache without touching the network
        return {"local_files_only": True}
    hint = name.rsplit("/", 1)[-1]
    raise HubUnavailableError(
        f"cannot load the {role} model {name!r}: it is not a local directory, not in the Hugging Face "
        f"cache, and the Hub is unreachable ({reason}). Download it where there is network "
        f"(`hf download {name} --local-dir /path/to/{hint}`), copy it here and point the pair at the "
        f"local copy, e.g. `pair.{role}=/path/to/{hint}` (and `pair.tokenizer=...` if set), or set "
        "HF_HOME to a populated Hugging Face cache."
    )


# ----------------------------------------------------------------------------- tokenizers


def check_tokenizers(a: Any, b: Any, name_a: str = "target", name_b: str = "draft") -> None:
    """ValueError unless `a` and `b` have the same vocabulary and special tokens."""
    va, vb = a.get_vocab(), b.get_vocab()
    if va != vb:
        only_a = sorted(set(va) - set(vb))[:5]
        only_b = sorted(set(vb) - set(va))[:5]
        moved = sorted(t for t in set(va) & set(vb) if va[t] != vb[t])[:5]
        raise ValueError(
            f"tokenizers of {name_a} and {name_b} differ: {len(va)} vs {len(vb)} tokens; "
            f"only in {name_a}: {only_a}, only in {name_b}: {only_b}, different ids: {moved}. "
            "Speculative decoding needs a draft that shares the target's tokenizer."
        )
    for attr in ("bos_token_id", "eos_token_id", "unk_token_id"):
        if getattr(a, attr, None) != getattr(b, attr, None):
            raise ValueError(
                f"tokenizers of {name_a} and {name_b} differ in {attr}: "
                f"{getattr(a, attr, None)} vs {getattr(b, attr, None)}"
            )


def _prepare_tokenizer(tokenizer: Any) -> Any:
    tokenizer.padding_side = "left"  # the engine takes left-padded prompts
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


# ----------------------------------------------------------------------------- loading


def _device(device: str) -> torch.device:
    if device == "auto":
        if torch.cuda.is_available():  # this process's GPU (LOCAL_RANK under torchrun / DDP)
            return torch.device("cuda", int(os.environ.get("LOCAL_RANK", torch.cuda.current_device())))
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    return torch.device(device)


def _dtype(dtype: str | torch.dtype, device: torch.device) -> str | torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":  # bf16 on accelerators, fp32 on CPU
        return torch.bfloat16 if device.type in ("cuda", "mps") else torch.float32
    return getattr(torch, dtype) if dtype != "config" else "auto"


def load_pair(
    target: str,
    draft: str,
    *,
    dtype: str = "auto",
    device: str = "auto",
    tokenizer: str | None = None,
    name: str | None = None,
    attn_implementation: str | None = None,
    revision: str | None = None,
    probe=None,
) -> Pair:
    """Load target and draft (Hub ids or local paths), frozen, on `device`, with one tokenizer.

    `dtype`: "auto" (bf16 on GPU, fp32 on CPU), "config" (the checkpoint's), or a torch dtype
    name. `tokenizer`: where to load the shared tokenizer from (default: the target's).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    probe_result: list[str | None] = []

    def probe_once() -> str | None:  # one network probe for the whole pair
        if not probe_result:
            probe_result.append((probe or probe_hub)())
        return probe_result[0]

    names = {"target": target, "draft": draft}
    if tokenizer is not None:
        names["tokenizer"] = tokenizer
    extra = {role: resolve(str(n), role, revision=revision, probe=probe_once) for role, n in names.items()}

    tok_target = AutoTokenizer.from_pretrained(target, revision=revision, **extra["target"])
    tok_draft = AutoTokenizer.from_pretrained(draft, revision=revision, **extra["draft"])
    check_tokenizers(tok_target, tok_draft, f"target {target!r}", f"draft {draft!r}")
    if tokenizer is not None:
        tok = AutoTokenizer.from_pretrained(tokenizer, revision=revision, **extra["tokenizer"])
        check_tokenizers(tok, tok_target, f"tokenizer {tokenizer!r}", f"target {target!r}")
    else:
        tok = tok_target

    dev = _device(device)
    kwargs: dict[str, Any] = {"dtype": _dtype(dtype, dev), "revision": revision}
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    models = {}
    for role, path in (("target", target), ("draft", draft)):
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs, **extra[role]).to(dev)
        model.eval().requires_grad_(False)
        models[role] = model

    return Pair(
        target=models["target"],
        draft=models["draft"],
        tokenizer=_prepare_tokenizer(tok),
        name=name or f"{Path(target).name}+{Path(draft).name}",
        target_name=target,
        draft_name=draft,
    )
