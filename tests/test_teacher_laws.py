"""The target's law caught while it samples (`record`, `TeacherLaws`) against a second forward."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from tiny_models import EOS, PAD, VOCAB, ragged_prompts, tiny_pair

from diversed.decoding.autoregressive import autoregressive_generate
from diversed.decoding.forward import Plan, SlotModel, use_forward
from diversed.training.draft_module import DistillModule, TeacherLaws
from diversed.training.teacher import TeacherTop, teacher_top

STOPS = (5, 6, 7)  # a task's `stop`: the row ends before the first of these (the token is dropped)
EOS_IDS = [EOS, 11, 12, 13]  # more ends than one id: some rows end early at T = 1


def stop(new: list[int], n: int) -> int | None:
    return next((i for i, x in enumerate(new) if x in STOPS), None)


class Task:
    """Just what `DistillModule` draws samples with: ragged prompts, a stop, a budget."""

    max_new_tokens = 12

    def encode(self, tok, examples):
        return [e["ids"] for e in examples]

    def stopper(self, tok):
        return stop


def module(target, prompt_positions: int, support=None, k: int = 8) -> DistillModule:
    m = DistillModule(
        None, rollout="target", reuse=True, top_k=k, prompt_positions=prompt_positions, temperature=0.8
    )
    m._pair = SimpleNamespace(
        target=target, draft=None, tokenizer=SimpleNamespace(eos_token_id=EOS_IDS, pad_token_id=PAD)
    )
    return m


def two_pass(m: DistillModule, task, examples, support):
    """The way samples were drawn before: the rollout, then a second target forward over prompt +
    completion at the scored slots (its laws [B, S, K] and the rows' layout)."""
    inputs, prompt_mask, _, new_tokens, at, weight = m.rollout_inputs(task, examples)
    logits = m.pair.target(**inputs, logits_to_keep=at).logits
    return inputs["input_ids"], new_tokens, at, weight, teacher_top(logits, support, m.hparams.top_k, 0.8)


@pytest.fixture
def examples():
    ids, mask = ragged_prompts((5, 9, 3, 7, 8, 2))
    return [{"ids": row[m.bool()].tolist()} for row, m in zip(ids, mask, strict=True)]


@pytest.mark.parametrize("path", ["hf", "direct"])
@pytest.mark.parametrize("prompt_positions", [-1, 0, 3])
@pytest.mark.parametrize("restricted", [False, True])
def test_the_laws_caught_while_sampling_are_the_second_forwards(path, prompt_positions, restricted, examples):
    target, _ = tiny_pair()
    use_forward(target, path)
    support = torch.arange(3, VOCAB, 2) if restricted else None  # a restricted draft's ids
    m, task = module(target, prompt_positions, support), Task()
    with torch.no_grad():  # (a seed whose draws end the rows every way: the last assert below)
        torch.manual_seed(4)
        sequences, new_tokens, at, weight, reference = two_pass(m, task, examples, support)
        torch.manual_seed(4)
        samples = m._draw(task, examples, support)
        torch.manual_seed(4)  # the laws themselves, before they are kept in half precision
        laws = TeacherLaws(support, 8, 0.8, Task.max_new_tokens)
        _, prompt_mask, _, _, at_f, _ = m.rollout_inputs(task, examples, laws)
        fused = laws.at(torch.arange(len(examples)), at_f, prompt_mask.shape[1])
    scored = weight > 0
    assert torch.equal(at_f, at) and torch.equal(fused.ids[scored], reference.ids[scored])
    assert (fused.logp - reference.logp)[scored].abs().max() < 1e-5
    finite = reference.rest[scored].isfinite()
    assert torch.equal(fused.rest[scored].isfinite(), finite)
    assert (fused.rest - reference.rest)[scored][finite].abs().max() < 1e-5
    # the rows ended every way: EOS, a stop (its token dropped), the budget
    assert (new_tokens < Task.max_new_tokens).sum() >= 2 and (new_tokens == Task.max_new_tokens).any()
    P, prompt_slots = max(len(e["ids"]) for e in examples), []
    for b, s in enumerate(samples):
        keep = weight[b] > 0
        left = P - len(examples[b]["ids"])
        # the same tokens drawn, the same slots scored (the random prompt slots too)
        assert torch.equal(s.ids, sequences[b, left : P + int(new_tokens[b])])
        assert torch.equal(s.at, at[keep] - left)
        n_prompt = int((s.at < s.prompt - 1).sum())
        if prompt_positions == -1:
            assert n_prompt == s.prompt - 1  # every slot predicting a prompt token
        assert n_prompt <= (P if prompt_positions == -1 else prompt_positions)  # 0: none, k: at most k
        prompt_slots.append(n_prompt)
        want = TeacherTop(*(t[b][keep] for t in reference))
        assert torch.equal(s.teacher.ids.long(), want.ids)
        # kept in half precision: compare with the reference rounded so, to a few half ulps
        assert torch.allclose(s.teacher.logp.float(), want.logp.half().float(), atol=2e-3, rtol=0)
        assert torch.allclose(s.teacher.rest.float(), want.rest.half().float(), atol=2e-3, rtol=0)
    assert (sum(prompt_slots) > 0) == (prompt_positions != 0)


@pytest.mark.parametrize("path", ["hf", "direct"])
def test_record_changes_nothing_drawn_and_hands_over_the_laws_within_rounding(path):
    target, _ = tiny_pair()
    use_forward(target, path)
    ids, mask = ragged_prompts((5, 9, 3, 7))
    steps = []

    def record(step):
        prompt = None if step.prompt is None else step.head(step.prompt)
        steps.append((step.step, step.rows.clone(), step.logits.clone(), prompt))

    def run(**kw):
        g = torch.Generator().manual_seed(0)
        return autoregressive_generate(
            target, ids, mask, max_new_tokens=10, do_sample=True, eos_token_id=EOS_IDS, generator=g, **kw
        )

    plain, recorded = run(stop=stop), run(stop=stop, record=record)
    assert torch.equal(plain.sequences, recorded.sequences)
    assert torch.equal(plain.stats.new_tokens, recorded.stats.new_tokens)
    assert [s[0] for s in steps] == list(range(len(steps))) and steps[0][3] is not None
    # the same laws, in float64 terms, as one teacher-forced forward over the kept text
    seq, P = recorded.sequences, ids.shape[1]
    text = torch.cat([mask, torch.arange(seq.shape[1] - P) < recorded.stats.new_tokens[:, None]], 1)
    with torch.no_grad():
        full = target(
            input_ids=seq, attention_mask=text, position_ids=(text.cumsum(-1) - 1).clamp_min(0)
        ).logits
    logp = lambda x: torch.log_softmax(x.double(), -1)  # noqa: E731
    gaps = []
    for step, rows, logits, _ in steps:
        live = recorded.stats.new_tokens[rows] > step  # rows that keep this step's token
        gaps.append((logp(logits[live]) - logp(full[rows[live], P + step - 1])).abs().max())
    prompt_slots = mask[:, :-1].bool() & mask[:, 1:].bool()  # slot i predicts a prompt token
    gaps.append((logp(steps[0][3][:, :-1]) - logp(full[:, : P - 1]))[prompt_slots].abs().max())
    assert max(gaps) < 1e-5
    with pytest.raises(ValueError, match="record must be a callable"):
        run(record=42)


def test_a_model_whose_logits_are_more_than_its_head_is_refused():
    target, _ = tiny_pair()

    class Scaled(type(target)):  # a logit scale after the head (as Cohere's, Granite's)
        def forward(self, *args, cache=None, **kwargs):
            out = super().forward(*args, cache=cache, **kwargs)
            out.logits = out.logits * 2
            return out

    target.__class__ = Scaled
    use_forward(target, "hf")
    ids, mask = ragged_prompts((5, 9))
    with pytest.raises(ValueError, match="does more than the head"):
        autoregressive_generate(target, ids, mask, max_new_tokens=2, record=lambda step: None)


@pytest.mark.parametrize("path", ["hf", "direct"])
def test_the_hidden_states_of_more_slots_than_logits_leave_the_logits_as_they_were(path):
    target, _ = tiny_pair()
    ids, mask = ragged_prompts((5, 9, 3, 7))
    pos = (mask.cumsum(-1) - 1).clamp_min(0)
    how = lambda: Plan(target, path == "direct")  # noqa: E731
    with torch.no_grad():
        plain = SlotModel(target, VOCAB, False, how())
        logits, hidden = plain.forward(ids, mask, pos, 9, keep=1)
        assert hidden is None
        wide = SlotModel(target, VOCAB, False, how())
        logits_w, states = wide.forward(ids, mask, pos, 9, keep=1, states=9)
        hooks = sum(len(m._forward_hooks) for m in target.modules())
        every = SlotModel(target, VOCAB, True, how())
        logits_e, hidden_e = every.forward(ids, mask, pos, 9, keep=9)
    assert torch.equal(logits, logits_w)  # bit for bit
    assert states.shape == (4, 9, target.config.hidden_size)
    text = mask.bool()
    assert torch.allclose(states[text], hidden_e[text], atol=1e-5)
    assert torch.allclose(wide.head(states)[text], logits_e[text], atol=1e-5)
    assert torch.equal(wide.head(states[:, -1:]), logits_w)  # the same product on the same states
    assert hooks == 0  # the catch is held for the call alone
