"""Top-k / top-p truncation of p and q (`verify.truncate`, `top_k=` / `top_p=` of every decoder): it is
transformers' own warpers, every verifier's output law follows from the truncated p and q, the
other decoders truncate alike, and the defaults change nothing."""

from __future__ import annotations

import pytest
import torch
from test_engine import chi2_pvalue, random_head
from test_rules import N_ROWS, PROMPT
from tiny_models import VOCAB, ragged_prompts, tiny_pair
from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from diversed import Cascade, DynamicEnsemble, Lossless, LossySD, StaticEnsemble, TypicalAcceptance
from diversed.decoding.autoregressive import autoregressive_generate
from diversed.decoding.engine import speculative_generate
from diversed.decoding.reference import transformers_generate
from diversed.decoding.rules import defer, lossy_first_token, typical_threshold
from diversed.decoding.verify import mix, probs_from_logits, truncate

T = 0.8  # not 1: the order temperature, then top-k, then top-p matters for top-p


@pytest.fixture(scope="module")
def pair():
    return tiny_pair()


def warped(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """The law transformers' `generate` samples from: its warpers in its order, then softmax."""
    warpers = LogitsProcessorList([TemperatureLogitsWarper(temperature)])
    if top_k:
        warpers.append(TopKLogitsWarper(top_k))
    if top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p))
    return warpers(None, logits.float().view(1, -1)).softmax(-1)[0]


# ----------------------------------------------------------------------------- the function


@pytest.mark.parametrize(
    "top_k, top_p", [(0, 1.0), (5, 1.0), (0, 0.7), (5, 0.7), (1, 1.0), (0, 0.05), (200, 0.99)]
)
def test_truncate_is_transformers_warpers_on_random_logits_with_ties(top_k, top_p):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 4, 50, generator=g) * 2
    logits[0, 0, :10] = logits[0, 0].max() + 1  # ten tokens tied at the top: top-k keeps every one of them
    logits[1, 2, [4, 9, 11, 30]] = logits[1, 2].max() + 0.5  # ties between the 2nd and the 5th value
    logits[2, 1] = torch.round(logits[2, 1])  # many ties everywhere
    ours = truncate(logits, top_k, top_p)
    assert ours.shape == logits.shape
    for i in range(3):
        for j in range(4):
            ref = logits[i, j : j + 1]
            if top_k:
                ref = TopKLogitsWarper(top_k)(None, ref)
            if top_p < 1.0:
                ref = TopPLogitsWarper(top_p)(None, ref)
            assert torch.equal(ours[i, j], ref[0]), (i, j)
    kept = ours > -float("inf")
    assert bool(kept.any(-1).all())  # min_tokens_to_keep = 1
    if top_k == 5 and top_p == 1.0:
        assert int(kept[0, 0].sum()) == 10  # every token tied with the 5th largest is kept
    if top_k and top_p == 1.0:  # top-k: keep x iff logit(x) >= the k-th largest
        kth = logits.topk(min(top_k, 50), -1).values[..., -1:]
        assert torch.equal(kept, logits >= kth)
    if not top_k and top_p < 1.0:  # top-p: the smallest set of the most probable tokens with mass >= top_p
        probs = logits.softmax(-1)
        mass = (probs * kept).sum(-1)
        least_kept = probs.masked_fill(~kept, float("inf")).min(-1).values
        assert bool((mass >= top_p - 1e-6).all()) and bool((mass - least_kept < top_p + 1e-6).all())
    # probabilities: temperature first, then the truncation
    probs = probs_from_logits(logits, T, top_k, top_p)
    assert torch.allclose(probs[1, 2], warped(logits[1, 2], T, top_k, top_p), atol=1e-7)
    if not top_k and top_p == 1.0:
        assert ours is logits and torch.equal(probs, probs_from_logits(logits, T))  # nothing is computed


# ----------------------------------------------------------------------------- every verifier's law


def first_logits(target, draft, prompt):
    """The target's and the draft's logits at the first generated position, by a direct forward."""
    with torch.no_grad():
        t = target(prompt, output_hidden_states=True)
        d = draft(prompt, output_hidden_states=True)
    return t.logits[0, -1], d.logits[0, -1], t.hidden_states[-1][:, -1:], d.hidden_states[-1][:, -1:]


def typical_law(p, q, epsilon, delta):
    """The first token of typical acceptance with one draft: an accepted x ~ q, else typical(p)."""
    threshold = typical_threshold(p, epsilon, delta)
    accepted = (p > threshold).float()
    typical = torch.where(p >= threshold, p, 0.0)
    return q * accepted + (1 - float((q * accepted).sum())) * typical / typical.sum()


@pytest.mark.parametrize("truncation", [{"top_k": 12}, {"top_p": 0.8}], ids=["top_k", "top_p"])
@pytest.mark.parametrize("kind", ["lossless", "static", "dynamic", "lossy", "cascade", "typical"])
def test_every_verifier_emits_the_law_of_the_truncated_p_and_q(pair, kind, truncation):
    """The first token (one draft at stake: max_new_tokens=2) has the law the rule implies for the
    truncated p and q, computed with transformers' warpers; not the law of the full softmax."""
    target, draft = pair
    lp, lq, ht, hd = first_logits(target, draft, PROMPT)
    top_k, top_p = truncation.get("top_k", 0), truncation.get("top_p", 1.0)
    p, q = warped(lp, T, top_k, top_p), warped(lq, T, top_k, top_p)  # truncated
    p0, q0 = warped(lp, T, 0, 1.0), warped(lq, T, 0, 1.0)  # the full softmax
    head = random_head(target, draft)
    laws = {  # (verifier, its law from (p, q))
        "lossless": (Lossless(), lambda p, q: p),
        "static": (StaticEnsemble(0.4), lambda p, q: mix(p, q, 0.4)),
        "dynamic": (DynamicEnsemble(head), lambda p, q: mix(p, q, float(head(hd, ht).detach()))),
        "lossy": (LossySD(0.5), lambda p, q: lossy_first_token(p, q, 0.5)),
        "cascade": (Cascade("diff", 0.05), lambda p, q: mix(p, q, float(defer("diff", 0.05, p, q)))),
        "typical": (TypicalAcceptance(0.05, 0.3), lambda p, q: typical_law(p, q, 0.05, 0.3)),
    }
    verifier, law = laws[kind]
    out = speculative_generate(
        target,
        draft,
        PROMPT.expand(N_ROWS, -1),
        verifier=verifier,
        num_draft_tokens=3,
        max_new_tokens=2,
        do_sample=True,
        temperature=T,
        eos_token_id=[],
        generator=torch.Generator().manual_seed(1),
        **truncation,
    )
    first = out.sequences[:, PROMPT.shape[1]]
    assert chi2_pvalue(first, law(p, q)) > 1e-3
    assert chi2_pvalue(first, law(p0, q0)) < 1e-6  # the test has power: truncation changes the law
    assert int((law(p, q) > 0).sum()) < VOCAB


def test_the_autoregressive_loop_and_transformers_truncate_alike(pair):
    """The target alone, on our loop and through transformers' `generate`: both sample the same
    truncated p (the checkpoint's generation config cannot add its own: the options are explicit)."""
    target, draft = pair
    lp, _, _, _ = first_logits(target, draft, PROMPT)
    p = warped(lp, T, 12, 0.9)
    rows = PROMPT.expand(N_ROWS, -1)
    gc = target.generation_config
    saved = gc.top_k, gc.top_p
    gc.top_k, gc.top_p = 3, 0.5  # what a checkpoint might ship
    try:
        kw = dict(max_new_tokens=1, do_sample=True, temperature=T, eos_token_id=[], top_k=12, top_p=0.9)
        ours = autoregressive_generate(target, rows, generator=torch.Generator().manual_seed(3), **kw)
        torch.manual_seed(3)
        theirs = transformers_generate(target, rows, **kw)
    finally:
        gc.top_k, gc.top_p = saved
    for out in (ours, theirs):
        first = out.sequences[:, PROMPT.shape[1]]
        assert chi2_pvalue(first, p) > 1e-3 and chi2_pvalue(first, warped(lp, T, 0, 1.0)) < 1e-6


# ----------------------------------------------------------------------------- the defaults


@pytest.mark.parametrize(
    "verifier",
    [Lossless(), StaticEnsemble(0.4), LossySD(0.5), TypicalAcceptance(0.05, 0.3)],
    ids=lambda v: v.kind,
)
def test_no_truncation_by_default_leaves_every_token_as_it_was(pair, verifier):
    """top_k = 0 / None and top_p = 1 are the full softmax: the same tokens and statistics as
    without the options, also through the warper code path (top_k = V keeps every token); greedy
    decoding never truncates."""
    target, draft = pair
    ids, mask = ragged_prompts()

    def run(do_sample=True, **kw):
        return speculative_generate(
            target,
            draft,
            ids,
            mask,
            verifier=verifier,
            num_draft_tokens=3,
            max_new_tokens=16,
            do_sample=do_sample,
            temperature=T,
            generator=torch.Generator().manual_seed(5),
            **kw,
        )

    base = run()
    for kw in ({"top_k": 0, "top_p": 1.0}, {"top_k": None}, {"top_k": VOCAB}):
        out = run(**kw)
        assert torch.equal(out.sequences, base.sequences) and torch.equal(
            out.stats.accepted, base.stats.accepted
        ), kw
    assert torch.equal(run(do_sample=False, top_k=2, top_p=0.3).sequences, run(do_sample=False).sequences)
    assert not torch.equal(run(top_k=2).sequences, base.sequences)  # (the option does reach the engine)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"top_k": -1}, "top_k"),
        ({"top_k": 2.5}, "top_k"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
    ],
)
def test_bad_truncation_is_refused_before_any_model_call(pair, kwargs, message):
    target, draft = pair
    ids, mask = ragged_prompts()
    for call in (
        lambda: speculative_generate(target, draft, ids, mask, do_sample=True, **kwargs),
        lambda: autoregressive_generate(target, ids, mask, do_sample=True, **kwargs),
        lambda: transformers_generate(target, ids, mask, do_sample=True, **kwargs),
    ):
        with pytest.raises(ValueError, match=message):
            call()
