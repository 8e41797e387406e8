"""Model surgery: a draft made from its target by cutting it, saved like any model.

`cut_layers` keeps a model's first decoder layers (its config, layer types included, updated);
`init_draft` saves the target so cut, with its own embeddings, final norm, LM head and tokenizer (so
the draft's tokenizer and vocabulary are the target's by construction), its head optionally
restricted to the ids most frequent in some texts (`decoding/draft_vocab.py`); with no cut, a model
saved whole with its head restricted (a real draft made cheaper: Qwen2.5-Coder-0.5B's 151,936-row
head is 0.28 of its weights).

It does not distil or measure the draft (`diversed.drafts` does both) and reads no task.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def cut_layers(model: Any, layers: int) -> Any:
    """`model` keeping its first `layers` decoder layers (config updated, layer types too)."""
    import torch

    config = model.config
    total = config.num_hidden_layers
    if not 1 <= layers < total:
        raise ValueError(
            f"a draft keeps between 1 and {total - 1} of the target's {total} layers, got {layers}"
        )
    base = model.base_model
    base.layers = torch.nn.ModuleList(list(base.layers)[:layers])
    config.num_hidden_layers = layers
    if getattr(config, "layer_types", None):
        config.layer_types = list(config.layer_types)[:layers]
    return model


def init_draft(
    target_dir: str | Path,
    layers: int | None,
    out: str | Path,
    vocab: int | None = None,
    texts: list[str] | None = None,
    first: list[list[int]] | None = None,
) -> Path:
    """Save the model in `target_dir` cut to its first `layers` layers (None: all of them) and its
    tokenizer into `out`; with `vocab`, its head restricted to the `vocab` most frequent ids of
    `texts` (specials always in; the ids of the token lists `first`, e.g. the model's own completions,
    ahead of the texts' by their frequency there)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from diversed.decoding import draft_vocab  # torch-free at import: the drafts verb imports this

    model = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(target_dir)
    if layers is not None:
        cut_layers(model, layers)
    if vocab is not None:
        specials = [
            i
            for i in (
                tokenizer.eos_token_id,
                tokenizer.bos_token_id,
                tokenizer.pad_token_id,
                *tokenizer.all_special_ids,
            )
            if i is not None
        ]
        if vocab < len(set(specials)):  # each special id must stay proposable (EOS ends rows)
            raise ValueError(
                f"a draft vocabulary of {vocab} ids cannot hold the {len(set(specials))} special ids"
            )
        ids = (tokenizer(t, add_special_tokens=False).input_ids for t in texts or [])
        draft_vocab.restrict(
            model,
            draft_vocab.rank_tokens(ids, vocab, draft_vocab.vocab_size(model), specials, first or ()),
        )
    draft_vocab.save_pretrained(model, out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return Path(out)
