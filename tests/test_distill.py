"""Distilling the draft towards the target: the divergences, a short run end to end, LoRA."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file
from tiny_models import compose_run

from diversed.distill import distill, divergence
from diversed.verify import total_variation

SMALL = ["+experiment=distill_toy", "logger=none", "trainer.max_steps=6", "trainer.val_check_interval=3",
         "trainer.enable_progress_bar=false", "data.batch_size=8", "data.n_val=16", "data.val_batch_size=16",
         "data.n_train=64", "distill.max_new_tokens=8", "distill.optimizer.lr=0.02", "distill.divergence=tvd"]  # fmt: skip


def test_divergences_are_what_they_say_and_pull_q_towards_p():
    g = torch.Generator().manual_seed(0)
    p_logits, q_logits = torch.randn(5, 40, generator=g) * 2, torch.randn(5, 40, generator=g) * 2
    p, q = p_logits.softmax(-1), q_logits.softmax(-1)
    assert torch.allclose(divergence(p_logits, q_logits, "forward_kl"), (p * (p / q).log()).sum(-1), atol=1e-5)
    assert torch.allclose(divergence(p_logits, q_logits, "reverse_kl"), (q * (q / p).log()).sum(-1), atol=1e-5)
    assert torch.allclose(divergence(p_logits, q_logits, "tvd"), total_variation(p, q), atol=1e-6)
    assert torch.allclose(divergence(p_logits, p_logits, "forward_kl"), torch.zeros(5), atol=1e-6)
    for kind in ("forward_kl", "tvd", "reverse_kl"):  # one gradient step on q's logits lowers D
        q_var = q_logits.clone().requires_grad_(True)
        before = divergence(p_logits, q_var, kind).sum()
        before.backward()
        after = divergence(p_logits, q_logits - 0.5 * q_var.grad, kind).sum()
        assert after < before, kind
    with pytest.raises(ValueError, match="divergence"):
        divergence(p_logits, q_logits, "js")


def acceptance(pair_dir, draft_dir, n=48, seed=0):
    """Lossless acceptance of a draft against the tiny target on held-out toy prompts (T = 1)."""
    from diversed import speculative_generate
    from diversed.inputs import left_pad
    from diversed.pair import load_pair
    from diversed.tasks import load_task

    pair = load_pair(str(pair_dir / "target"), str(draft_dir), device="cpu", dtype="float32")
    task = load_task("toy", split="validation", n_examples=n)
    ids, mask = left_pad(task.encode(pair.tokenizer, task.examples), pair.tokenizer.pad_token_id, "cpu")
    out = speculative_generate(pair.target, pair.draft, ids, mask, num_draft_tokens=4, max_new_tokens=8,
                               do_sample=True, generator=torch.Generator().manual_seed(seed),
                               eos_token_id=pair.tokenizer.eos_token_id, pad_token_id=pair.tokenizer.pad_token_id)
    return out.stats.acceptance_rate


def test_a_short_distillation_raises_acceptance_and_saves_a_loadable_draft(tmp_path, toy_tiny_dir):
    cfg = compose_run("distill", tmp_path / "run", toy_tiny_dir, SMALL)
    result = distill(cfg)
    draft = tmp_path / "run" / "draft"
    assert result["draft_dir"] == str(draft)
    assert (draft / "model.safetensors").is_file() and (draft / "tokenizer_config.json").is_file()
    assert 0 <= result["metrics"]["val/acceptance_rate"] <= 1
    ckpt = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert all(k.startswith("draft.") for k in ckpt["state_dict"])  # never the target
    before = acceptance(toy_tiny_dir, toy_tiny_dir / "draft")
    after = acceptance(toy_tiny_dir, draft)
    assert after > before + 0.05, (before, after)


def test_lora_trains_adapters_only_and_saves_them_merged(tmp_path, toy_tiny_dir):
    pytest.importorskip("peft")
    cfg = compose_run("distill", tmp_path / "run", toy_tiny_dir, SMALL,
                      ["+distill.lora={r: 4, alpha: 8, target_modules: [q_proj, v_proj]}"])  # fmt: skip
    distill(cfg)
    saved = load_file(tmp_path / "run" / "draft" / "model.safetensors")
    base = load_file(toy_tiny_dir / "draft" / "model.safetensors")
    assert set(saved) == set(base)  # merged: no adapter tensors left
    changed = {k for k in base if not torch.equal(base[k], saved[k])}
    assert changed and all(("q_proj" in k or "v_proj" in k) for k in changed), changed


def test_bad_distill_settings_fail_before_the_pair_loads(tmp_path, toy_tiny_dir, monkeypatch):
    from transformers import PreTrainedModel

    monkeypatch.setattr(PreTrainedModel, "from_pretrained", classmethod(lambda *a, **k: pytest.fail("weights read")))
    for override, message in (("distill.divergence=js", "distill.divergence"), ("distill.rollout=both", "rollout"),
                              ("distill.mixed_fraction=2", "mixed_fraction")):  # fmt: skip
        with pytest.raises(ValueError, match=message):
            distill(compose_run("distill", tmp_path / "run", toy_tiny_dir, SMALL, [override]))
