"""A draft with a restricted vocabulary (diversed/decoding/draft_vocab.py): q(x) = 0 exactly outside its
K ids, and every verifier still follows its law; saved and loaded with its head."""

from __future__ import annotations

import copy
import math

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
from diversed.decoding.draft_vocab import (
    FILE,
    DraftVocabHead,
    attach,
    rank_tokens,
    restrict,
    save_pretrained,
    vocab_size,
)
from diversed.decoding.forward import plan, use_forward
from diversed.decoding.rules import defer, lossy_first_token, typical_threshold
from diversed.decoding.verify import Ensemble, at_token, mix, total_variation
from diversed.training.teacher import divergence


def outside_of(index: torch.Tensor, vocab: int = VOCAB) -> torch.Tensor:
    """[V] bool: the ids a draft over `index` never proposes (q = 0)."""
    out = torch.ones(vocab, dtype=torch.bool)
    out[index] = False
    return out


def inside_law(law: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """`law` restricted to `index` and renormalised: what a verifier that lost p's mass outside the
    draft's vocabulary would emit (the wrong law the chi-square tests must reject)."""
    kept = torch.where(outside_of(index, law.numel()), 0.0, law)
    return kept / kept.sum()


@pytest.fixture(scope="module")
def restricted():
    """The tiny pair with the draft restricted to 48 of 96 ids, leaving out the target's 8 likeliest
    first tokens at PROMPT and its greedy first token on each ragged prompt (so p has real mass, and
    greedy its argmax, where q is 0)."""
    target, draft = tiny_pair()
    p, _, _ = first_position(target, draft, PROMPT)
    ids, mask = ragged_prompts()
    with torch.no_grad():
        ragged_first = target(ids, attention_mask=mask).logits[:, -1].argmax(-1)
    out = set(p.argsort(descending=True)[:8].tolist()) | set(ragged_first.tolist())
    index = torch.tensor(sorted(set([i for i in range(VOCAB) if i not in out][:48]) | {EOS}))
    return target, restrict(copy.deepcopy(draft), index), index


# ----------------------------------------------------------------------------- the head


def test_the_head_gives_zero_outside_and_the_full_heads_law_inside(restricted):
    target, small, index = restricted
    _, full = tiny_pair()
    head = small.get_output_embeddings()
    assert isinstance(head, DraftVocabHead) and isinstance(head, torch.nn.Linear)
    assert (head.out_features, head.in_features, head.vocab) == (
        index.numel(),
        full.config.hidden_size,
        VOCAB,
    )
    assert torch.equal(head.weight, full.lm_head.weight[index]) and torch.equal(head.index, index)
    assert vocab_size(small) == vocab_size(full) == VOCAB
    assert torch.equal(small.get_input_embeddings().weight, full.get_input_embeddings().weight)  # untouched
    assert small.config.tie_word_embeddings is False
    with torch.no_grad():
        logits_small, logits_full = small(PROMPT).logits[0], full(PROMPT).logits[0]  # every position
    outside = outside_of(index)
    assert logits_small.shape == logits_full.shape
    assert torch.isneginf(logits_small[:, outside]).all() and torch.isfinite(logits_small[:, index]).all()
    q_small, q_full = logits_small.softmax(-1), logits_full.softmax(-1)
    assert float(q_small[:, outside].abs().max()) == 0.0  # q = 0 EXACTLY
    inside = q_full[:, index] / q_full[:, index].sum(-1, keepdim=True)
    assert torch.allclose(q_small[:, index], inside, atol=1e-6)
    p, _, _ = first_position(target, small, PROMPT)
    assert float(p[outside].sum()) > 0.1  # the cases below really meet q = 0 where p > 0
    # a list of ids gives the same head as a tensor
    again = restrict(copy.deepcopy(full), index.tolist()).get_output_embeddings()
    assert torch.equal(again.weight, head.weight) and torch.equal(again.index, head.index)


def test_a_bad_vocabulary_is_refused():
    w = torch.zeros(2, 4)
    with pytest.raises(ValueError, match="distinct"):
        DraftVocabHead(w, torch.tensor([1, 1]), 10)
    with pytest.raises(ValueError, match="below"):
        DraftVocabHead(w, torch.tensor([1, 10]), 10)
    with pytest.raises(ValueError, match="below"):
        DraftVocabHead(w, torch.tensor([-1, 3]), 10)
    with pytest.raises(ValueError, match="below"):
        DraftVocabHead(w, torch.tensor([1, 2, 3]), 10)  # 3 ids for 2 rows
    _, draft = tiny_pair()
    with pytest.raises(ValueError, match="distinct"):
        restrict(copy.deepcopy(draft), [3, 4, 4])
    for ids in ([3, VOCAB], [-1, 3], []):  # refused before a row is looked up (−1 would wrap to the last)
        with pytest.raises(ValueError, match="below"):
            restrict(copy.deepcopy(draft), ids)
    with pytest.raises(ValueError, match="restricted already"):
        restrict(restrict(copy.deepcopy(draft), [3, 4]), [3])


def test_rank_tokens_keeps_the_most_frequent_ids_and_every_id_once():
    corpus = [[5, 5, 6, 7, 7, 7], [6, 6, 9, 42]]  # 42 is beyond the vocabulary: ignored
    assert rank_tokens(corpus, 3, 10, always=[0]).tolist() == [0, 6, 7]  # 6 and 7 thrice, 5 twice
    assert rank_tokens(corpus, 4, 10, always=[0, 0]).tolist() == [0, 5, 6, 7]
    assert rank_tokens([[1, 2]], 3, 10).tolist() == [0, 1, 2]  # 1 and 2 seen, then the unseen by id
    for k in (10, 12):  # k ≥ V: the whole vocabulary, each id once (a head over it is valid)
        index = rank_tokens(corpus, k, 10, always=[0, 9])
        assert index.tolist() == list(range(10))
        DraftVocabHead(torch.zeros(10, 4), index, 10)
    # `first` (a model's own completions): its ids ahead of the corpus's, by their frequency there
    assert rank_tokens(corpus, 3, 10, always=[0], first=[[8, 3, 3]]).tolist() == [0, 3, 8]
    assert rank_tokens(corpus, 2, 10, always=[0], first=[[8, 3, 3]]).tolist() == [0, 3]  # 3 twice, 8 once
    assert rank_tokens(corpus, 5, 10, always=[0], first=[[8, 3, 3, -1]]).tolist() == [0, 3, 6, 7, 8]
    assert rank_tokens(corpus, 2, 10, always=[4, 1, 2]).tolist() == [1, 4]  # never more than k


# ----------------------------------------------------------------------------- files


def test_saved_and_loaded_with_its_head(restricted, tmp_path):
    from transformers import AutoModelForCausalLM

    _, small, index = restricted
    with torch.no_grad():
        before = small(PROMPT).logits
    save_pretrained(small, tmp_path / "d")
    # saving leaves the model as it was
    assert (
        isinstance(small.get_output_embeddings(), DraftVocabHead)
        and small.config.tie_word_embeddings is False
    )
    assert (tmp_path / "d" / FILE).is_file()
    bare = AutoModelForCausalLM.from_pretrained(tmp_path / "d").eval()  # any loader reads the files
    with torch.no_grad():
        assert torch.isfinite(bare(PROMPT).logits).all() and bare(PROMPT).logits.shape[-1] == VOCAB
    loaded = attach(bare, tmp_path / "d")
    head = loaded.get_output_embeddings()
    assert isinstance(head, DraftVocabHead) and head.vocab == VOCAB and torch.equal(head.index, index)
    with torch.no_grad():
        after, again = loaded(PROMPT).logits, small(PROMPT).logits
    assert torch.isneginf(after).sum() == PROMPT.numel() * (VOCAB - index.numel())
    assert torch.equal(after, before) and torch.equal(again, before)  # −inf positions included

    plain = tiny_pair()[1]
    save_pretrained(plain, tmp_path / "plain")
    assert not (tmp_path / "plain" / FILE).exists()
    reloaded = attach(AutoModelForCausalLM.from_pretrained(tmp_path / "plain"), tmp_path / "plain").eval()
    assert type(reloaded.lm_head) is torch.nn.Linear
    assert torch.equal(reloaded.lm_head.weight, plain.lm_head.weight)  # its own head, not the embeddings
    with torch.no_grad():
        assert torch.equal(reloaded(PROMPT).logits, plain(PROMPT).logits)


def test_load_pair_puts_the_restricted_head_back(tmp_path):
    from diversed.models.pair import load_pair
    from diversed.models.toy_corpus import build_tokenizer

    tok = build_tokenizer()
    assert (tok.pad_token_id, tok.eos_token_id) == (PAD, EOS)
    target, draft = tiny_pair(vocab=len(tok))  # one vocabulary for the models and the tokenizer
    index = torch.arange(0, len(tok), 3)
    small = restrict(draft, index)
    for model, role in ((target, "target"), (small, "draft")):
        save_pretrained(model, tmp_path / role)
        tok.save_pretrained(tmp_path / role)
    pair = load_pair(
        str(tmp_path / "target"), str(tmp_path / "draft"), dtype="float32", device="cpu", probe=lambda: None
    )
    head = pair.draft.get_output_embeddings()
    assert isinstance(head, DraftVocabHead) and torch.equal(head.index, index) and head.vocab == len(tok)
    assert type(pair.target.get_output_embeddings()) is torch.nn.Linear
    assert not any(p.requires_grad for m in (pair.target, pair.draft) for p in m.parameters())
    with torch.no_grad():
        assert torch.equal(pair.draft(PROMPT).logits, small(PROMPT).logits)
        assert torch.equal(pair.target(PROMPT).logits, target(PROMPT).logits)
    ids, mask = ragged_prompts(vocab=len(tok))
    ref = target.generate(
        ids, attention_mask=mask, do_sample=False, max_new_tokens=8, pad_token_id=PAD, eos_token_id=EOS
    )
    out = speculative_generate(
        pair.target,
        pair.draft,
        ids,
        mask,
        num_draft_tokens=3,
        max_new_tokens=8,
        eos_token_id=EOS,
        pad_token_id=PAD,
    )
    assert torch.equal(out.sequences[:, : ref.shape[1]], ref)


def test_a_fine_tuned_draft_in_a_sweep_keeps_its_restricted_head(restricted, tmp_path):
    from types import SimpleNamespace

    from diversed.sweep.point import load_drafts

    target, small, _ = restricted
    save_pretrained(small, tmp_path / "ft")
    pair = SimpleNamespace(target=target, device=torch.device("cpu"), forward="auto")
    loaded = load_drafts([str(tmp_path / "ft")], pair)[str(tmp_path / "ft")]
    assert isinstance(loaded.get_output_embeddings(), DraftVocabHead)


# ----------------------------------------------------------------------------- exactness through the engine


def test_lossless_greedy_with_a_restricted_draft_equals_generate_on_both_paths(restricted):
    target, small, index = restricted
    ids, mask = ragged_prompts()
    ref = target.generate(
        ids, attention_mask=mask, do_sample=False, max_new_tokens=12, pad_token_id=PAD, eos_token_id=EOS
    )
    new = ref[:, ids.shape[1] :]
    outside = outside_of(index)
    assert outside[new[:, 0]].all()  # the target's first argmax is never a draft proposal
    assert outside[new].float().mean() > 0.3  # nor are many later ones
    try:
        for path in ("direct", "hf"):
            use_forward(target, path)
            use_forward(small, path)
            out = speculative_generate(
                target,
                small,
                ids,
                mask,
                num_draft_tokens=3,
                max_new_tokens=12,
                eos_token_id=EOS,
                pad_token_id=PAD,
            )
            assert plan(small).path == path and plan(target).path == path
            assert torch.equal(out.sequences[:, : ref.shape[1]], ref), path
            assert 0 < out.stats.acceptance_rate < 1, path  # both drafts accepted and rejected
    finally:
        use_forward(target, "auto")
        use_forward(small, "auto")


def test_every_verifier_keeps_its_law_where_q_is_zero(restricted):
    target, small, index = restricted
    p, q, _ = first_position(target, small, PROMPT)
    outside = outside_of(index)
    assert float(q[outside].abs().max()) == 0.0 and float(p[outside].sum()) > 0.1
    tv = float(total_variation(p, q))
    head = random_head(target, small)
    _, _, w_head = first_position(target, small, PROMPT, head)
    threshold = typical_threshold(p, 0.05, 0.3)
    passes = (p > threshold).float()
    typical = torch.where(p >= threshold, p, 0.0)
    typical_law = q * passes + (1 - float((q * passes).sum())) * typical / typical.sum()
    w_defers, w_keeps = float(defer("chow", 0.5, p, q)), float(defer("diff", 0.05, p, q))
    assert (w_defers, w_keeps) == (1.0, 0.0)  # one cascade follows p, the other q
    # name: (verifier, the law of the first token, its exact acceptance, a wrong law)
    laws = {
        "lossless": (Lossless(), p, float(torch.minimum(p, q).sum()), inside_law(p, index)),
        "static": (StaticEnsemble(0.4), mix(p, q, 0.4), 1 - 0.4 * tv, inside_law(mix(p, q, 0.4), index)),
        "dynamic": (
            DynamicEnsemble(head),
            mix(p, q, w_head),
            1 - w_head * tv,
            inside_law(mix(p, q, w_head), index),
        ),
        "lossy": (
            LossySD(0.5),
            lossy_first_token(p, q, 0.5),
            float(torch.minimum(q, p / 0.5).sum()),
            inside_law(lossy_first_token(p, q, 0.5), index),
        ),
        "cascade_defers": (Cascade("chow", 0.5), p, 1 - tv, inside_law(p, index)),
        "cascade_keeps": (Cascade("diff", 0.05), q, 1.0, p),
        "typical": (
            TypicalAcceptance(0.05, 0.3),
            typical_law,
            float((q * passes).sum()),
            inside_law(typical_law, index),
        ),
    }
    for name, (verifier, law, rate, wrong) in laws.items():
        assert abs(float(law.sum()) - 1) < 1e-5, name
        if name != "cascade_keeps":
            assert float(law[outside].sum()) > 0.05, name  # the law needs the residual's mass outside
        x, stats = first_tokens(target, small, verifier)
        assert chi2_pvalue(x, law) > 1e-3, name
        assert chi2_pvalue(x, wrong) < 1e-6, name  # the test has power
        assert close(stats.acceptance_rate, rate), (name, stats.acceptance_rate, rate)
        assert stats.alpha == stats.acceptance_rate, name  # one draft at stake, always verified
        assert abs(stats.mean_tv - tv) < 1e-5, name  # TV(p, q) over q's zeros, as computed here
        summary = stats.summary()
        for key, value in summary.items():
            if isinstance(value, float):
                assert math.isfinite(value), (name, key)
        assert torch.isfinite(stats.tv_sum).all() and torch.isfinite(stats.w_sum).all(), name
    x, _ = first_tokens(target, small, Lossless())
    assert chi2_pvalue(x, q) < 1e-6  # the draft's law is not the target's


# ----------------------------------------------------------------------------- the pure functions


def exact_accept(verifier, p, p_x, q_x, w) -> torch.Tensor:
    """P(accept x) for a drafted x (q(x) > 0), by each rule's formula (p: [n, V]; the rest [n])."""
    if isinstance(verifier, Ensemble):
        return torch.clamp((w * p_x + (1 - w) * q_x) / q_x, max=1.0)  # min(1, v(x)/q(x))
    if isinstance(verifier, LossySD):
        return torch.clamp(p_x / (verifier.lenience * q_x), max=1.0)  # min(1, p(x)/(l·q(x)))
    assert isinstance(verifier, TypicalAcceptance)
    return (p_x > typical_threshold(p, verifier.epsilon, verifier.delta)).float()  # p(x) > min(ε, δ·e^−H(p))


def test_verifiers_pure_functions_with_zeros_in_q(restricted):
    """Random p with full support, q with zeros (supports of 1 to 90 ids, an underflowing residual):
    accept probabilities are finite in [0, 1] and what each rule says; rejection and bonus laws are
    finite, non-negative and sum to 1, the residual keeping p's mass where q is 0."""
    target, small, _ = restricted
    g = torch.Generator().manual_seed(3)
    rows, drafts, m = 8, 5, 1000
    p_logits = torch.randn(rows, VOCAB, generator=g) * 2
    q_logits = torch.randn(rows, VOCAB, generator=g) * 2
    support = torch.zeros(rows, VOCAB, dtype=torch.bool)
    for r, k in enumerate((1, 2, 5, 20, 48, 90, 30, 30)):
        support[r, torch.randperm(VOCAB, generator=g)[:k]] = True
    # rows 6, 7: p ∝ q inside, p's mass outside tiny (e^-60) or below float32's smallest normal
    # (e^-92, subnormal: the residual's mass underflows and it falls back to p)
    low = q_logits[6:].max(-1, keepdim=True).values - torch.tensor([[60.0], [92.0]])
    p_logits[6:] = torch.where(support[6:], q_logits[6:], low)
    q = torch.where(support, q_logits, float("-inf")).softmax(-1)
    p = p_logits.softmax(-1)
    assert (p > 0).all() and (q[~support] == 0).all()
    mass = (p - q).clamp_min(0).sum(-1)
    assert mass[6] > torch.finfo(p.dtype).tiny > mass[7] > 0  # row 7 exercises the residual's fallback to p
    x = torch.multinomial(q, drafts, replacement=True, generator=g)  # [rows, drafts], drafted from q
    # one position per (row, draft), each repeated m times for the empirical acceptance
    P = p.repeat_interleave(drafts, 0).expand(m, -1, -1)  # [m, n, V]
    Q = q.repeat_interleave(drafts, 0).expand(m, -1, -1)
    X = x.reshape(-1).expand(m, -1)
    H = small.config.hidden_size
    hd, ht = (torch.randn(1, rows * drafts, H, generator=g).expand(m, -1, -1) for _ in range(2))
    verifiers = [
        Lossless(),
        StaticEnsemble(0.4),
        DynamicEnsemble(random_head(target, small)),
        LossySD(0.5),
        Cascade("chow", 0.5),
        Cascade("diff", 0.05),
        TypicalAcceptance(0.05, 0.3),
    ]
    for v in verifiers:
        name = repr(v)
        w = v.weights(P, Q, hd, ht)
        p_x, q_x = at_token(P, X)[0], at_token(Q, X)[0]
        assert (q_x > 0).all()
        w0 = w[0] if isinstance(w, torch.Tensor) else w  # [n]: every repeat has the same w
        exact = exact_accept(v, P[0], p_x, q_x, w0)
        assert torch.isfinite(exact).all() and (exact >= 0).all() and (exact <= 1).all(), name
        accepted = v.accept(P, Q, X, w, torch.Generator().manual_seed(5))
        assert accepted.dtype == torch.bool and accepted.shape == X.shape, name
        rate = accepted.float().mean(0)
        assert ((rate - exact).abs() <= 5 * (exact * (1 - exact) / m).sqrt() + 1e-3).all(), name
        # rejection and bonus, at [n, V] as the engine calls them
        pk, qk = P[0], Q[0]
        laws = {
            "rejection": v.rejection(pk, qk, w0),
            "bonus": v.bonus(pk, None, w0),
            "bonus_q": v.bonus(pk, qk, w0),
        }
        for kind, law in laws.items():
            assert law.shape == pk.shape and torch.isfinite(law).all() and (law >= 0).all(), (name, kind)
            assert torch.allclose(law.sum(-1), torch.ones(len(law)), atol=1e-5), (name, kind)
        if not isinstance(v, TypicalAcceptance):  # the residual normalize(max(0, p − c·q)) ≥ p where q = 0
            zero = qk == 0
            assert (laws["rejection"][zero] >= pk[zero] * (1 - 1e-5)).all(), name
        for f in (v.greedy_rejection(pk, qk, w0), v.greedy_bonus(pk, qk, w0), v.greedy_bonus(pk, None, w0)):
            assert f.shape == (len(pk),) and ((0 <= f) & (f < VOCAB)).all(), name
        assert (
            v.greedy_accept(P[:1], Q[:1], X[:1], w[:1] if isinstance(w, torch.Tensor) else w).dtype
            == torch.bool
        )


# ----------------------------------------------------------------------------- training


def test_divergences_are_finite_with_finite_gradients_on_a_restricted_head(restricted):
    _, small, index = restricted
    outside = outside_of(index)
    g = torch.Generator().manual_seed(0)
    for scale in (1.0, 30.0):  # 30: q and p near one-hot
        head = copy.deepcopy(small.get_output_embeddings()).requires_grad_(True)
        h = (torch.randn(3, 5, head.in_features, generator=g) * scale).requires_grad_(True)
        p_logits = torch.randn(3, 5, VOCAB, generator=g) * 2 * scale
        q_logits = head(h)
        assert torch.isneginf(q_logits[..., outside]).all()
        p, q = p_logits.softmax(-1), q_logits.softmax(-1)
        assert float(p[..., outside].sum(-1).min()) > 0 or scale > 1
        for kind in ("forward_kl", "tvd", "reverse_kl"):
            d = divergence(p_logits, head(h), kind)
            d.sum().backward()
            assert torch.isfinite(d).all(), (kind, scale)
            assert kind == "forward_kl" or (d >= -1e-6).all(), (
                kind,
                scale,
            )  # (forward KL on q's support: < 0 too)
            assert torch.isfinite(h.grad).all() and torch.isfinite(head.weight.grad).all(), (kind, scale)
            assert head.weight.grad.abs().sum() > 0, (kind, scale)  # the head learns
            h.grad, head.weight.grad = None, None
        with torch.no_grad():
            direct_tvd = 0.5 * (p - q).abs().sum(-1)
            assert torch.allclose(divergence(p_logits, q_logits, "tvd"), direct_tvd, atol=1e-6)
            log_p, log_q = p_logits.log_softmax(-1), q_logits.log_softmax(-1)
            inside = ~outside
            fkl = (p[..., inside] * (log_p[..., inside] - log_q[..., inside])).sum(-1)  # over q's support
            rkl = (q[..., inside] * (log_q[..., inside] - log_p[..., inside])).sum(-1)
            assert torch.allclose(divergence(p_logits, q_logits, "forward_kl"), fkl, atol=1e-4, rtol=1e-5)
            assert torch.allclose(divergence(p_logits, q_logits, "reverse_kl"), rkl, atol=1e-4, rtol=1e-5)
