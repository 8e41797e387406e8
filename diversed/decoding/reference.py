"""transformers' own decoding, as an outside reference: `model.generate` with the target alone, and
assisted generation (lossless, or with `assistant_ensemble_weight`, transformers' static ensemble).

`transformers_generate` returns the same `(sequences, stats)` as the engine, so the bench and the
sweep report it like any other method. Its statistics come from counting forward calls
(`meter.count_calls`: a hook on each model's output embeddings): with the target alone every step
is a round; assisted generation (batch 1 only, as transformers allows) calls the target once per
round and the draft once per proposed token, so accepted = new tokens − rounds (exact unless EOS
cuts a round). Rows end at EOS, at the length budget, or at a task's `stop` callback (through
`stopping.GenerateStop`).

It is a reference, not the fair baseline: `generate` runs a different forward path from the
engine's (see `autoregressive.py` for the baseline on the same path). Sampling draws from torch's
global generator, as `generate` does: seed it first. The sampling truncation is passed explicitly
(`top_k`, `top_p`; by default none), so the checkpoint's generation config, which `generate` would
otherwise merge in (`GenerationMixin._prepare_generation_config`), never adds its own: the same
p and q as the engine's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext

import torch
from torch import Tensor, nn

from diversed.decoding.draft_vocab import vocab_size
from diversed.decoding.engine import SpeculativeOutput
from diversed.decoding.inputs import check_decoding, check_prompts, device_of, special_tokens
from diversed.decoding.meter import count_calls
from diversed.decoding.stats import SpeculativeStats
from diversed.decoding.stopping import GenerateStop, generated_lengths


@contextmanager
def assistant_config(draft: nn.Module, n: int) -> Iterator[None]:
    """The draft's generation_config for assisted generation: always N drafts (a constant schedule,
    `num_assistant_tokens` = N, no confidence threshold), restored afterwards."""
    gc = draft.generation_config
    keys = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")
    saved = {k: getattr(gc, k, None) for k in keys}
    gc.num_assistant_tokens, gc.num_assistant_tokens_schedule, gc.assistant_confidence_threshold = (
        n,
        "constant",
        0.0,
    )
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(gc, k, v)


@torch.inference_mode()
def transformers_generate(
    target: nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor | None = None,
    *,
    draft: nn.Module | None = None,
    ensemble_weight: float | None = None,
    num_draft_tokens: int = 5,
    max_new_tokens: int = 128,
    do_sample: bool = False,
    temperature: float = 1.0,
    eos_token_id: int | list[int] | None = None,
    pad_token_id: int | None = None,
    stop: Callable[[list[int], int], int | None] | None = None,
    top_k: int | None = 0,
    top_p: float = 1.0,
) -> SpeculativeOutput:
    """`target.generate` on left-padded prompts, assisted by `draft` if given (batch 1), against
    v = w·p + (1 − w)·q with `ensemble_weight` = w (in (0, 1), as transformers requires); when
    sampling, p and q are truncated by transformers' top-k and top-p warpers (0 or None, 1.0: none)."""
    check_decoding(max_new_tokens, temperature, top_k, top_p)
    check_prompts(input_ids, attention_mask, device_of(target))
    if draft is not None and input_ids.shape[0] != 1:
        raise ValueError(
            f"transformers' assisted generation runs at batch 1 only, got a batch of {input_ids.shape[0]}"
        )
    if ensemble_weight is not None and (draft is None or not 0.0 < float(ensemble_weight) < 1.0):
        raise ValueError(
            "ensemble_weight needs a draft and a value in (0, 1) (transformers' rule), "
            f"got {ensemble_weight!r}"
        )
    eos, pad = special_tokens(target, eos_token_id, pad_token_id)
    kwargs = _generate_options(do_sample, temperature, top_k, top_p, draft, ensemble_weight)
    vocab = vocab_size(target)
    stopped = (
        GenerateStop(stop, input_ids.shape[1], input_ids.shape[0], vocab, input_ids.device) if stop else None
    )
    models = {"target": target, **({"draft": draft} if draft is not None else {})}
    start = time.perf_counter()
    assisted = assistant_config(draft, num_draft_tokens) if draft is not None else nullcontext()
    with count_calls(models) as calls, assisted:
        sequences = target.generate(
            input_ids,
            attention_mask=attention_mask,
            max_new_tokens=max_new_tokens,
            eos_token_id=eos,
            pad_token_id=pad,
            stopping_criteria=[stopped] if stopped else None,
            **kwargs,
        )
    if input_ids.device.type == "cuda":
        torch.cuda.synchronize(input_ids.device)
    wall = time.perf_counter() - start
    P = input_ids.shape[1]
    new_tokens = generated_lengths(sequences[:, P:], eos, stopped.cuts if stopped else None)
    sequences = sequences[:, : P + int(new_tokens.max())].clone()  # no columns past the longest row
    stats = _counted(new_tokens, calls, num_draft_tokens if draft is not None else None, wall)
    # rows are padded after their end (pad may be EOS): positions past new_tokens are pad
    cols = torch.arange(sequences.shape[1] - P, device=sequences.device)
    sequences[:, P:] = torch.where(cols < new_tokens.view(-1, 1).to(sequences.device), sequences[:, P:], pad)
    with torch.inference_mode(False):  # hand back ordinary tensors, as the engine does
        sequences = sequences.clone()
    return SpeculativeOutput(sequences, stats.ordinary())


def _generate_options(do_sample, temperature, top_k, top_p, draft, ensemble_weight) -> dict:
    """`generate`'s sampling and assistance keyword arguments: the truncation always explicit, so the
    checkpoint's generation config adds none."""
    kwargs: dict = {"do_sample": False}
    if do_sample and float(temperature) > 0:
        kwargs = {
            "do_sample": True,
            "temperature": float(temperature),
            "top_k": int(top_k or 0),
            "top_p": float(top_p),
        }
    if draft is not None:
        kwargs["assistant_model"] = draft
        if ensemble_weight is not None:
            kwargs["assistant_ensemble_weight"] = float(ensemble_weight)
    return kwargs


def _counted(new_tokens: Tensor, calls: dict[str, int], n: int | None, wall: float) -> SpeculativeStats:
    """The statistics from the forward calls counted: without a draft (`n` None) every step is a round
    of every row still running; assisted (batch 1, `n` drafts a round) a round is one target call and
    a proposal one draft call, accepted = new tokens − rounds, lengths per round unknown."""
    B = new_tokens.shape[0]
    zeros = torch.zeros(B, dtype=torch.long)
    if n is None:
        rounds, proposed, accepted = new_tokens.clone(), zeros, zeros
        hist = rounds.view(B, 1).clone()
    else:
        rounds = torch.tensor([calls["target"]])
        proposed = torch.tensor([calls["draft"]])
        accepted = (new_tokens - rounds).clamp_min(0)
        hist = torch.zeros(B, 0, dtype=torch.long)
    return SpeculativeStats(
        proposed=proposed,
        accepted=accepted,
        rounds=rounds,
        new_tokens=new_tokens,
        accepted_hist=hist,
        w_sum=torch.zeros(B),
        w_count=zeros,
        target_calls=calls["target"],
        draft_calls=calls.get("draft", 0),
        wall_time_s=wall,
        verifier="transformers" + ("" if n is None else "-assisted"),
        num_draft_tokens=[n] * int(rounds.max()) if n is not None else [],
    )
