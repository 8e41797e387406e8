"""What a decoding loop is given: a left-padded batch of prompts, the pair's shared vocabulary, and
the EOS and pad ids, each checked before any model is called.

The engine (`engine.py`) and the autoregressive loop (`autoregressive.py`) both read their inputs
through here, so they pad, count vocabularies and resolve special tokens the same way, and refuse an
empty prompt (a row without a token: nothing to decode from) alike. It does
not tokenize text (the tasks do) and does not call models.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from diversed.decoding.draft_vocab import vocab_size


def device_of(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def ordinary_ids(vocab: int, n: int, device: torch.device | str | None = None) -> Tensor:
    """[n] ids spread over a vocabulary of `vocab`, away from its first ids: those of a real
    vocabulary are control tokens that a model never reads as input, whose activations are chaotic
    (SmolLM2 in bf16 on ids 0–11). For a model's checks and calibration where no text is at hand."""
    return (vocab // 3 + 7919 * torch.arange(n, device=device)) % vocab


def shared_vocab(vt: int, vd: int) -> int:
    """Vocabulary compared on, from the two output-embedding sizes: the smaller one when the larger
    is only padded (as in Qwen pairs); ValueError otherwise."""
    small, large = min(vt, vd), max(vt, vd)
    # An embedding matrix padded for efficiency rounds the vocabulary up (to a multiple of 64 or
    # 128, or by well under 10%); anything else is another vocabulary.
    padded = large - small < 0.1 * large or any(-(-small // m) * m == large for m in (64, 128, 256))
    if not padded:
        larger = "draft" if vd > vt else "target"
        raise ValueError(
            f"the target's output embedding has {vt} rows and the draft's {vd}: the {larger}'s is larger "
            "by more than padding, so p and q are not over one vocabulary; speculative decoding needs a "
            f"draft with the target's vocabulary (or the {larger}'s embeddings resized to "
            f"{small}: model.resize_token_embeddings({small}))"
        )
    return small


def shared_vocab_size(target: nn.Module, draft: nn.Module) -> int:
    """`shared_vocab` of two loaded models."""
    return shared_vocab(vocab_size(target), vocab_size(draft))


def token_ids(value: Any) -> list[int]:
    """An id, a list of ids, a tensor or None as a list of ints."""
    if value is None:
        return []
    if isinstance(value, int | Tensor):
        value = torch.as_tensor(value).flatten().tolist()
    return [int(v) for v in value]


def special_tokens(model: nn.Module, eos_token_id: Any, pad_token_id: int | None) -> tuple[list[int], int]:
    """EOS ids and the pad id: as given, else the model's generation config (pad: the first EOS, else 0)."""
    gen_config = getattr(model, "generation_config", None)
    eos = token_ids(eos_token_id if eos_token_id is not None else getattr(gen_config, "eos_token_id", None))
    if pad_token_id is None:
        pad_token_id = getattr(gen_config, "pad_token_id", None)
        pad_token_id = pad_token_id if pad_token_id is not None else (eos[0] if eos else 0)
    return eos, int(pad_token_id)


def check_prompts(input_ids: Any, attention_mask: Any, device: torch.device) -> None:
    """ValueError unless the prompts are a left-padded [batch, length] batch on `device` with a token
    in every row: an empty prompt has nothing to decode from (give it its start token at least)."""
    if not isinstance(input_ids, Tensor) or input_ids.dim() != 2:
        raise ValueError("input_ids must be a [batch, length] tensor with at least one token per row")
    if input_ids.shape[1] < 1:
        raise ValueError(
            "input_ids has no token (an empty prompt): there is nothing to decode from; give each row "
            "at least one token (its start token, e.g. tokenizer.bos_token_id)"
        )
    if input_ids.device != device:
        raise ValueError(
            f"input_ids are on {input_ids.device} but the models on {device}: move them with .to()"
        )
    if attention_mask is not None:
        if attention_mask.shape != input_ids.shape:
            raise ValueError(
                f"attention_mask shape {tuple(attention_mask.shape)} != input_ids {tuple(input_ids.shape)}"
            )
        m = attention_mask.bool()
        if not bool(m[:, -1].all()) or bool((m[:, 1:] < m[:, :-1]).any()):
            if rows := (~m.any(1)).nonzero().flatten().tolist():  # (an empty row ends in padding too)
                raise ValueError(
                    f"rows {rows} of input_ids are empty prompts (attention_mask 0 everywhere): there is "
                    "nothing to decode from; give each row at least one token (its start token, e.g. "
                    "tokenizer.bos_token_id)"
                )
            raise ValueError("prompts must be left-padded (tokenizer.padding_side = 'left')")


def check_decoding(max_new: Any, temperature: Any, top_k: Any = 0, top_p: Any = 1.0) -> None:
    if isinstance(max_new, bool) or not isinstance(max_new, int) or max_new < 1:
        raise ValueError(f"max_new_tokens must be an integer >= 1, got {max_new!r}")
    if temperature is None or not float(temperature) >= 0:
        raise ValueError(f"temperature must be >= 0 (0 means greedy), got {temperature!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0):
        raise ValueError(f"top_k must be an integer >= 0 (0 or None: no top-k truncation), got {top_k!r}")
    if isinstance(top_p, bool) or not isinstance(top_p, int | float) or not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1] (1: no top-p truncation), got {top_p!r}")


def left_pad(seqs: Sequence[Sequence[int]], pad_id: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """Left-pad token lists into (input_ids, attention_mask)."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, width - len(s) :] = torch.tensor(s, dtype=torch.long)
        mask[i, width - len(s) :] = 1
    return ids.to(device), mask.to(device)
