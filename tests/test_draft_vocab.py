"""A draft with a restricted vocabulary (diversed/draft_vocab.py): q(x) = 0 exactly outside its K ids,
and every verifier still follows its law; saved and loaded with its head."""

from __future__ import annotations

import copy

import pytest
import torch
from test_engine import chi2_pvalue, first_position, random_head
from test_rules import PROMPT, close, first_tokens
from tiny_models import EOS, PAD, VOCAB, ragged_prompts, tiny_pair

from diversed import (
    Cascade,
    DynamicEnsemble,
    Lossless,
    LossySD,
    StaticEnsemble,
    TypicalAcceptance,
    speculative_generate,
)
from diversed.distill import divergence
from diversed.draft_vocab import DraftVocabHead, attach, rank_tokens, restrict, save_pretrained, vocab_size
from diversed.forward import use_forward
from diversed.rules import defer, lossy_first_token, typical_threshold
from diversed.verify import mix


@pytest.fixture(scope="module")
def restricted():
    """The tiny pair with the draft restricted to 48 of 96 ids, leaving out the target's 8 likeliest
    first tokens at PROMPT (so p has real mass where q is 0)."""
    target, draft = tiny_pair()
    p, _, _ = first_position(target, draft, PROMPT)
    out = set(p.argsort(descending=True)[:8].tolist())
    keep = [i for i in range(VOCAB) if i not in out][:48] + [EOS]
    small = restrict(copy.deepcopy(draft), sorted(set(keep)))
    return target, small, torch.tensor(sorted(set(keep)))


def test_the_head_gives_zero_outside_and_the_full_heads_law_inside(restricted):
    target, small, index = restricted
    _, full = tiny_pair()
    assert isinstance(small.get_output_embeddings(), DraftVocabHead) and vocab_size(small) == VOCAB
    q_small = small(PROMPT).logits[0, -1].softmax(-1)
    q_full = full(PROMPT).logits[0, -1].softmax(-1)
    outside = torch.ones(VOCAB, dtype=torch.bool)
    outside[index] = False
    assert float(q_small[outside].abs().max()) == 0.0
    assert torch.allclose(q_small[index], q_full[index] / q_full[index].sum(), atol=1e-6)
    p, _, _ = first_position(target, small, PROMPT)
    assert float(p[outside].sum()) > 0.1  # the cases below really meet q = 0 where p > 0
    with pytest.raises(ValueError, match="distinct"):
        DraftVocabHead(torch.zeros(2, 4), torch.tensor([1, 1]), 10)
    with pytest.raises(ValueError, match="below"):
        DraftVocabHead(torch.zeros(2, 4), torch.tensor([1, 10]), 10)
    assert rank_tokens([[5, 5, 6, 7, 7, 7]], 3, 10, always=[0]).tolist() == [0, 5, 7]


def test_lossless_greedy_with_a_restricted_draft_equals_generate_on_both_paths(restricted):
    target, small, _ = restricted
    ids, mask = ragged_prompts()
    ref = target.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=12, pad_token_id=PAD, eos_token_id=EOS)
    for path in ("direct", "hf"):
        use_forward(target, path)
        use_forward(small, path)
        out = speculative_generate(target, small, ids, mask, num_draft_tokens=3, max_new_tokens=12,
                                   eos_token_id=EOS, pad_token_id=PAD)  # fmt: skip
        assert torch.equal(out.sequences[:, : ref.shape[1]], ref), path
    use_forward(target, "auto")
    use_forward(small, "auto")


def test_every_verifier_keeps_its_law_where_q_is_zero(restricted):
    target, small, _ = restricted
    p, q, _ = first_position(target, small, PROMPT)
    head = random_head(target, small)
    _, _, w_head = first_position(target, small, PROMPT, head)
    threshold = typical_threshold(p, 0.05, 0.3)
    passes = (p > threshold).float()
    typical = torch.where(p >= threshold, p, 0.0)
    w_defer = float(defer("diff", 0.05, p, q))
    laws = {
        "lossless": (Lossless(), p, float(torch.minimum(p, q).sum())),
        "static": (StaticEnsemble(0.4), mix(p, q, 0.4), float(torch.minimum(mix(p, q, 0.4), q).sum())),
        "dynamic": (DynamicEnsemble(head), mix(p, q, w_head), None),
        "lossy": (LossySD(0.5), lossy_first_token(p, q, 0.5), float(torch.minimum(q, p / 0.5).sum())),
        "cascade": (Cascade("diff", 0.05), mix(p, q, w_defer), None),
        "typical": (TypicalAcceptance(0.05, 0.3),
                    q * passes + (1 - float((q * passes).sum())) * typical / typical.sum(), float((q * passes).sum())),
    }  # fmt: skip
    for name, (verifier, law, rate) in laws.items():
        x, stats = first_tokens(target, small, verifier)
        assert abs(float(law.sum()) - 1) < 1e-5, name
        assert chi2_pvalue(x, law) > 1e-3, name
        summary = stats.summary()
        assert all(v == v and abs(v) != float("inf") for v in summary.values() if isinstance(v, float)), name
        if rate is not None:
            assert close(stats.acceptance_rate, rate), name
    x, _ = first_tokens(target, small, Lossless())
    assert chi2_pvalue(x, q) < 1e-6  # the test has power: the draft's law is not the target's


def test_divergences_are_finite_with_finite_gradients_on_a_restricted_head(restricted):
    _, small, index = restricted
    head = copy.deepcopy(small.get_output_embeddings())
    h = torch.randn(3, 5, head.in_features, requires_grad=True)
    p_logits = torch.randn(3, 5, VOCAB)
    for kind in ("forward_kl", "tvd", "reverse_kl"):
        d = divergence(p_logits, head(h), kind)
        d.sum().backward()
        assert torch.isfinite(d).all() and torch.isfinite(h.grad).all() and torch.isfinite(head.weight.grad).all(), kind
        h.grad, head.weight.grad = None, None
    direct = 0.5 * (p_logits.softmax(-1) - head(h).softmax(-1)).abs().sum(-1)
    assert torch.allclose(divergence(p_logits, head(h), "tvd"), direct, atol=1e-6)


def test_saved_and_loaded_with_its_head(restricted, tmp_path):
    from transformers import AutoModelForCausalLM

    _, small, _ = restricted
    save_pretrained(small, tmp_path / "d")
    loaded = attach(AutoModelForCausalLM.from_pretrained(tmp_path / "d"), tmp_path / "d").eval()
    assert isinstance(loaded.get_output_embeddings(), DraftVocabHead)
    with torch.no_grad():
        assert torch.equal(loaded(PROMPT).logits, small(PROMPT).logits)
    plain = tiny_pair()[1]
    save_pretrained(plain, tmp_path / "plain")
    assert not (tmp_path / "plain" / "draft_vocab.safetensors").exists()
    assert type(attach(AutoModelForCausalLM.from_pretrained(tmp_path / "plain"), tmp_path / "plain").lm_head) is torch.nn.Linear


def test_a_fine_tuned_draft_in_a_sweep_keeps_its_restricted_head(restricted, tmp_path):
    from types import SimpleNamespace

    from diversed.evaluate import load_drafts

    target, small, _ = restricted
    save_pretrained(small, tmp_path / "ft")
    pair = SimpleNamespace(target=target, device=torch.device("cpu"), forward="auto")
    loaded = load_drafts([str(tmp_path / "ft")], pair)[str(tmp_path / "ft")]
    assert isinstance(loaded.get_output_embeddings(), DraftVocabHead)
