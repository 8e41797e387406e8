"""Tiny random Llama pairs for tests: one vocabulary, the draft a damped copy of the target."""

from __future__ import annotations

import copy

import torch
from transformers import LlamaConfig, LlamaForCausalLM

VOCAB = 96
EOS = 2
PAD = 0


def tiny_pair(
    seed: int = 0, vocab: int = VOCAB, draft_vocab: int | None = None, layers: int = 3, hidden: int = 64
):
    """Target: `layers` layers; draft: the target's first layer alone, with its own final norm.

    The target's later layers are damped so that p and q are close but not equal: acceptance is
    neither 0 nor 1. The draft has a different hidden size only if asked through `tiny_pair_mixed`.
    """
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        initializer_range=0.2,
        bos_token_id=1,
        eos_token_id=EOS,
        pad_token_id=PAD,
        tie_word_embeddings=False,
    )
    target = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for layer in target.model.layers[1:]:
            layer.self_attn.o_proj.weight.mul_(0.4)
            layer.mlp.down_proj.weight.mul_(0.4)
    draft_config = copy.deepcopy(config)
    draft_config.num_hidden_layers = 1
    draft_config.vocab_size = draft_vocab or vocab
    draft = LlamaForCausalLM(draft_config).eval()
    state = {
        k: v
        for k, v in target.state_dict().items()
        if not k.startswith("model.layers.") or k.startswith("model.layers.0.")
    }
    if draft_vocab and draft_vocab != vocab:
        for key in ("model.embed_tokens.weight", "lm_head.weight"):
            w = draft.state_dict()[key].clone()
            n = min(vocab, draft_vocab)
            w[:n] = state[key][:n]
            if draft_vocab > vocab:
                w[vocab:] = 0.0 if key == "model.embed_tokens.weight" else -1e4 / w.shape[1]
            state[key] = w
    draft.load_state_dict(state)
    for m in (target, draft):
        m.generation_config.eos_token_id = EOS
        m.generation_config.pad_token_id = PAD
        m.requires_grad_(False)
    return target, draft


def ragged_prompts(lengths=(5, 9, 3, 7), seed: int = 1, vocab: int = VOCAB):
    """Left-padded prompts of different lengths (ids avoid pad/eos)."""
    g = torch.Generator().manual_seed(seed)
    P = max(lengths)
    ids = torch.full((len(lengths), P), PAD, dtype=torch.long)
    mask = torch.zeros((len(lengths), P), dtype=torch.long)
    for i, n in enumerate(lengths):
        ids[i, P - n :] = torch.randint(3, vocab, (n,), generator=g)
        mask[i, P - n :] = 1
    return ids, mask


def compose_run(config_name: str, output_dir, pair_dir, overrides: list[str], extra=()):
    """The `config_name` config (train or evaluate) with `overrides`, the saved pair in `pair_dir`,
    then `extra` (a test's own), writing to `output_dir`."""
    from hydra import compose, initialize_config_dir
    from omegaconf import open_dict

    from diversed import CONFIG_DIR

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose(config_name, overrides=[*overrides, *pair_overrides(pair_dir), *extra])
    with open_dict(cfg):
        cfg.paths.output_dir = str(output_dir)
    return cfg


def pair_overrides(pair_dir) -> list[str]:
    """Hydra overrides that point `pair` at a saved pair directory (target/ and draft/)."""
    return [
        "pair=local",
        f"pair.target={pair_dir}/target",
        f"pair.draft={pair_dir}/draft",
        "pair.name=tiny-toy",
        "pair.device=cpu",
        "pair.dtype=float32",
    ]
