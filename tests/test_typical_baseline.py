"""Typical acceptance beside an autoregressive baseline with its own truncation: every token from
typical(p) = p restricted to the tokens with p(x) ≥ min(ε, δ·exp(−H(p))), renormalised (the method
`autoregressive_typical`), its law, its greedy decoding, its place in the registry and in a sweep."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from test_engine import chi2_pvalue
from tiny_models import EOS, PAD, compose_run, ragged_prompts, tiny_pair

from diversed import TypicalAcceptance, autoregressive_generate
from diversed.decoding.rules import entropy, typical_threshold, typical_truncation
from diversed.decoding.verify import StaticEnsemble, sample
from diversed.sweep.grid import grid
from diversed.sweep.methods import METHODS, TYPICAL_DELTA, TYPICAL_EPSILON, Method


@pytest.fixture(scope="module")
def pair():
    return tiny_pair()


# ----------------------------------------------------------------------------- the law


def test_typical_truncation_is_its_formula_and_the_rules_own_law():
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(3 * torch.randn(5, 40, generator=g), -1)
    for eps, delta in ((0.05, 0.3), (0.3, 0.3), (1.0, 1.0), (0.01, 0.01)):
        tau = torch.clamp(delta * torch.exp(-entropy(p)), max=eps)  # min(ε, δ·exp(−H(p)))
        kept = p * (p >= tau[:, None])
        expected = kept / kept.sum(-1, keepdim=True)
        got = typical_truncation(p, eps, delta)
        assert torch.allclose(got, expected, atol=1e-7) and torch.equal(got > 0, p >= tau[:, None])
        assert bool((got.argmax(-1) == p.argmax(-1)).all())  # argmax p always passes (δ ≤ 1)
        rule = TypicalAcceptance(eps, delta)
        assert torch.equal(rule.bonus(p, None, None), got) and torch.equal(rule.rejection(p, p, None), got)
    assert torch.equal(typical_threshold(p, 0.05, 0.3), torch.clamp(0.3 * torch.exp(-entropy(p)), max=0.05))


def _replayed(target, ids, mask, steps, seed, law, T=1.0):
    """The loop's tokens, drawn again from `law(p)` of the target's recorded logits at each step with
    the loop's own noise (one uniform per row of the batch as it started, per step)."""
    seen = []
    out = autoregressive_generate(
        target,
        ids,
        mask,
        verifier=TypicalAcceptance(0.05, 0.3),
        max_new_tokens=steps,
        do_sample=True,
        temperature=T,
        eos_token_id=[],
        generator=torch.Generator().manual_seed(seed),
        record=lambda s: seen.append((s.rows.clone(), s.logits.clone())),
    )
    g = torch.Generator().manual_seed(seed)
    B, P = ids.shape
    for step, (rows, logits) in enumerate(seen):
        noise = torch.rand(B, dtype=torch.float64, generator=g)[rows]
        x = sample(law(torch.softmax(logits / T, -1)), noise=noise)
        assert torch.equal(out.sequences[rows, P + step], x)
    return out


@pytest.mark.parametrize("T", [1.0, 0.7])
def test_each_token_is_drawn_from_the_typical_truncation_of_p(pair, T):
    """Exact, step by step: the token the loop emits is the one its noise picks from typical(p) of
    that step's logits (and, where typical(p) differs from p, not always the one it picks from p)."""
    target, _ = pair
    ids, mask = ragged_prompts()
    out = _replayed(target, ids, mask, 12, 3, lambda p: typical_truncation(p, 0.05, 0.3), T)
    assert out.stats.verifier == "autoregressive-typical" and int(out.stats.proposed.sum()) == 0
    plain = autoregressive_generate(
        target,
        ids,
        mask,
        max_new_tokens=12,
        do_sample=True,
        temperature=T,
        eos_token_id=[],
        generator=torch.Generator().manual_seed(3),
    )
    assert not torch.equal(out.sequences, plain.sequences)  # the truncation changes what is drawn


def test_the_first_tokens_law_is_typical_p(pair):
    """Statistically too: 6000 first tokens against typical(p) of a direct forward."""
    target, _ = pair
    prompt = torch.tensor([[5, 17, 33, 8, 61, 12]])
    with torch.no_grad():
        p = target(prompt).logits[0, -1].float().softmax(-1)
    law = typical_truncation(p, 0.05, 0.3)
    assert 1 < int((law > 0).sum()) < int((p > 1e-6).sum())  # a truncation that keeps several tokens
    out = autoregressive_generate(
        target,
        prompt.expand(6000, -1),
        verifier=TypicalAcceptance(0.05, 0.3),
        max_new_tokens=1,
        do_sample=True,
        eos_token_id=[],
        generator=torch.Generator().manual_seed(1),
    )
    first = out.sequences[:, prompt.shape[1]]
    assert bool((law[first] > 0).all())  # never a token outside typical(p)
    assert chi2_pvalue(first, law) > 1e-3


def test_greedy_is_plain_autoregressive_decoding_and_a_tiny_delta_keeps_every_token(pair):
    target, _ = pair
    ids, mask = ragged_prompts()
    kwargs = {"max_new_tokens": 15, "eos_token_id": EOS, "pad_token_id": PAD}
    plain = autoregressive_generate(target, ids, mask, **kwargs)
    typical = autoregressive_generate(target, ids, mask, verifier=TypicalAcceptance(0.05, 0.3), **kwargs)
    assert torch.equal(plain.sequences, typical.sequences)
    assert torch.equal(plain.stats.new_tokens, typical.stats.new_tokens)
    # δ → 0: the threshold falls below every p(x) of this small vocabulary, typical(p) = p
    sampled = {"do_sample": True, **kwargs}
    plain = autoregressive_generate(target, ids, mask, generator=torch.Generator().manual_seed(5), **sampled)
    loose = autoregressive_generate(
        target,
        ids,
        mask,
        verifier=TypicalAcceptance(1e-12, 1e-12),
        generator=torch.Generator().manual_seed(5),
        **sampled,
    )
    assert torch.equal(plain.sequences, loose.sequences)


def test_a_rule_whose_law_needs_the_draft_is_refused_without_one(pair):
    target, _ = pair
    ids, mask = ragged_prompts()
    with pytest.raises(ValueError, match="needs the draft"):
        autoregressive_generate(target, ids, mask, verifier=StaticEnsemble(0.5), max_new_tokens=2)


# ----------------------------------------------------------------------------- the registry and the grid


def test_the_registry_has_it_on_typical_acceptances_knobs():
    m, typical = METHODS["autoregressive_typical"], METHODS["typical"]
    assert not m.speculative and m.decoder == "autoregressive"
    assert m.knobs == typical.knobs == (TYPICAL_EPSILON, TYPICAL_DELTA)
    assert m.family == typical.family == "typical_epsilon"
    assert m.row_name == "Autoregressive, typical-truncated p"
    point = {"method": m.name, "typical_epsilon": 0.3, "typical_delta": 0.5, "temperature": 1.0}
    rule = m.verifier(point, {})
    assert isinstance(rule, TypicalAcceptance) and (rule.epsilon, rule.delta) == (0.3, 0.5)
    assert m.describe(point) == "Autoregressive, typical ε=0.3 δ=0.5"
    with pytest.raises(ValueError, match="knobs set the law"):  # knobs without a law to set
        Method(
            "ar_knobs",
            "AR {typical_epsilon:g}",
            speculative=False,
            decoder="autoregressive",
            knobs=(TYPICAL_EPSILON,),
        )


def test_one_sweep_over_epsilon_runs_both_methods():
    sweep = {
        "methods": ["autoregressive", "typical", "autoregressive_typical"],
        "temperatures": [0.0, 1.0],
        "draft_lengths": [2, 5],
        "typical_epsilons": [0.05, 0.3],
        "typical_deltas": [0.3],
    }
    points = list(grid(sweep, {}))
    ar = [p for p in points if p["method"] == "autoregressive_typical"]
    assert [(p["temperature"], p["typical_epsilon"]) for p in ar] == [
        (0.0, 0.05),
        (0.0, 0.3),
        (1.0, 0.05),
        (1.0, 0.3),
    ]
    assert all("num_draft_tokens" not in p and p["typical_delta"] == 0.3 for p in ar)  # once per ε, not per N
    assert sum(p["method"] == "typical" for p in points) == 2 * 2 * 2
    assert sum(p["method"] == "autoregressive" for p in points) == 2


def test_the_settings_accept_it_in_sweep_methods():
    from diversed.evaluate import check_evaluate

    cfg = compose_run(
        "evaluate",
        "/tmp/unused",
        "/tmp/pair",
        ["+experiment=toy", "sweep.methods=[autoregressive,typical,autoregressive_typical]"],
    )
    check_evaluate(cfg)


# ----------------------------------------------------------------------------- a sweep and its report


def test_a_sweep_records_it_per_epsilon_and_the_report_chooses_its_epsilon(tmp_path, toy_tiny_dir):
    """Validation and test runs of the toy task over ε ∈ {0.05, 0.3}: the baseline's records carry
    its knobs and no N; greedy, its completions are plain autoregressive decoding's; the report
    chooses its ε on the validation run, as it chooses typical acceptance's, and gives it a row."""
    from diversed.analysis.fronts import choose_on
    from diversed.evaluate import evaluate
    from diversed.report import load_runs, write_report
    from diversed.sweep.results import ResultStore, load_results

    runs = []
    for split in ("validation", "test"):
        cfg = compose_run(
            "evaluate",
            tmp_path / split,
            toy_tiny_dir,
            [
                "+experiment=toy",
                f"task.split={split}",
                "task.n_examples=8",
                "task.max_new_tokens=6",
                "sweep.methods=[autoregressive,typical,autoregressive_typical]",
                "sweep.typical_epsilons=[0.05,0.3]",
                "sweep.typical_deltas=[0.3]",
                "sweep.draft_lengths=[2]",
                "sweep.temperatures=[0.0,1.0]",
                "sweep.num_seeds=1",
                "timing.warmup=0",
                "timing.repeats=1",
                "runtime.progress=false",
            ],
        )
        runs.append(evaluate(cfg))
    df = load_results(runs[1])
    ar = df[df.method == "autoregressive_typical"]
    assert len(ar) == 4 and sorted(set(ar.typical_epsilon)) == [0.05, 0.3]
    assert ar.num_draft_tokens.isna().all() and ar.acceptance_rate.isna().all()
    assert (ar.normalized_time > 0).all()  # timed against autoregressive decoding
    store = ResultStore(runs[1])

    def completions(method, T, eps=None):
        rec = next(
            r
            for r in store.records()
            if r["method"] == method and r["temperature"] == T and r.get("typical_epsilon") == eps
        )
        return [e["completion"] for e in store.examples(rec["key"])]

    assert completions("autoregressive_typical", 0.0, 0.05) == completions("autoregressive", 0.0)
    choices = choose_on(load_runs([runs[0]]))
    picked = choices[choices.method == "autoregressive_typical"]
    assert len(picked) == 2 and set(picked.family) == {"typical_epsilon"}  # one per T
    assert set(choices.method) >= {"typical", "autoregressive_typical"}
    write_report(runs, tmp_path / "report", formats=("png",))
    table = (tmp_path / "report" / "table_T1.md").read_text()
    row = next(line for line in table.splitlines() if "Autoregressive, typical-truncated p" in line)
    assert "ε=" in row
    assert pd.notna(picked.value).all()
