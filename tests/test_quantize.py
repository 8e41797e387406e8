"""An int8 draft (`pair.draft_quantize=int8`, models/quantize.py): its layers and its head are int8,
smoothed on a fixed passage (exact in float, closer to the float layer in int8), the engine's direct
path runs it and agrees with its modules, padding never sets a real slot's rounding there, lossless
decoding stays exactly the target's, and a setting that cannot run is refused before any weights are
read. An int8 target (`pair.target_quantize=int8`): each row's product is its own to the bit, so a
verification computes the loop's p and lossless decoding is the int8 target's."""

from __future__ import annotations

import contextlib
import json

import pytest
import torch
import transformers
from test_forward import VOCAB, assert_exact, tiny
from tiny_models import PAD, ragged_prompts
from torch import nn

from diversed import speculative_generate
from diversed.decoding.draft_vocab import DraftVocabHead
from diversed.decoding.forward import Plan, SlotModel, forward_path, plan
from diversed.errors import ConfigError
from diversed.models.heads import pair_record
from diversed.models.pair import load_pair
from diversed.models.quantize import (
    CALIBRATION,
    EVERY_CALL,
    SHORT_ROWS,
    Int8Linear,
    calibration_ids,
    check_quantize,
    quantize_member,
    scheme,
    smoothing,
)


def int8_draft(layers: int = 2, seed: int = 1, **extra):
    return quantize_member(tiny(transformers.LlamaConfig, layers, seed, **extra), "int8")


def int8_target(layers: int = 2, seed: int = 0, **extra):
    return quantize_member(tiny(transformers.LlamaConfig, layers, seed, **extra), "int8", anchored=True)


def test_the_layers_and_the_head_are_int8_and_smoothed():
    float_draft = tiny(transformers.LlamaConfig, 2, 1)
    draft = int8_draft()
    kinds = {type(m) for name, m in draft.named_modules() if name.endswith("proj")}
    assert kinds == {Int8Linear}
    head = draft.get_output_embeddings()
    assert type(head) is Int8Linear and isinstance(head, nn.Linear)  # still a linear head to transformers
    assert all(m.inv_smooth is not None for m in draft.modules() if isinstance(m, Int8Linear))
    assert not any(m._forward_pre_hooks for m in draft.modules())  # the calibration's hooks are gone
    ids, mask = ragged_prompts(vocab=VOCAB)
    with torch.no_grad():
        ref = float_draft(input_ids=ids, attention_mask=mask).logits[mask.bool()].softmax(-1)
        got = draft(input_ids=ids, attention_mask=mask).logits[mask.bool()].softmax(-1)
    tv = 0.5 * (got - ref).abs().sum(-1).mean()
    assert 0 < tv < 0.1  # rounded, and only rounded (0.04 here)


def test_short_calls_are_rounded_and_long_ones_are_the_float_layer():
    """Up to SHORT_ROWS rows (decoding steps): int8 weights and input, close to the float layer; more
    rows (a prompt pass): the float layer to the bit."""
    torch.manual_seed(0)
    linear = nn.Linear(32, 48)
    layer = Int8Linear(linear)
    for rows in (1, SHORT_ROWS):
        x = torch.randn(rows, 32)
        got, ref = layer(x), linear(x)
        assert not torch.equal(got, ref) and (got - ref).abs().max() < 0.05 * ref.abs().max()
        assert torch.equal(layer.direct_projection()(x), got)
    x = torch.randn(2, SHORT_ROWS, 32)  # 3D as transformers calls it: rows are batch × slots
    assert torch.equal(layer(x), linear(x))
    assert torch.equal(layer.direct_projection()(x.view(-1, 32)), linear(x).view(-1, 48))


def test_a_restricted_head_keeps_q_zero_outside_its_support():
    draft = tiny(transformers.LlamaConfig, 2, 1)
    keep = torch.arange(0, VOCAB, 2)
    head = draft.get_output_embeddings()
    draft.set_output_embeddings(DraftVocabHead(head.weight[keep].clone(), keep, VOCAB))
    quantize_member(draft, "int8")
    assert type(draft.get_output_embeddings()) is DraftVocabHead
    assert type(draft.get_output_embeddings().project) is Int8Linear  # its K-row product
    with torch.no_grad():
        logits = draft(input_ids=torch.tensor([[5, 9, 11]])).logits
    outside = torch.ones(VOCAB, dtype=torch.bool)
    outside[keep] = False
    assert torch.isneginf(logits[..., outside]).all() and torch.isfinite(logits[..., keep]).all()


def test_the_direct_path_runs_int8_layers_as_their_modules_do():
    draft = int8_draft(attention_bias=True, mlp_bias=True)
    chosen = plan(draft)
    assert chosen.direct and "checked against model(...)" in chosen.reason
    assert forward_path(draft) == "direct"
    ids = torch.randint(3, VOCAB, (2, 7), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    pos = (mask.cumsum(-1) - 1).clamp_min(0)
    with torch.no_grad():
        hf = SlotModel(draft, VOCAB, True, Plan(draft, False)).forward(ids, mask, pos, 7, 7)
        direct = SlotModel(draft, VOCAB, True, Plan(draft, True)).forward(ids, mask, pos, 7, 7)
    for a, b in zip(hf, direct, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("anchored", [False, True])
def test_the_path_check_runs_int8_layers_in_float_on_padded_rows_and_decoding_rounds_again(
    monkeypatch, anchored
):
    """Rounding to 8 bits turns the ulps by which model(...) and the direct way differ on a padded
    batch into whole rounding steps (SmolLM2's int8 draft: logits 1.2 apart; Qwen2.5-Coder-1.5B's int8
    target: 0.4 of the scale), so the direct path's check runs the int8 layers' float product, on
    padding and a hole as for a float model, and the plan it returns rounds again once it is done."""
    import diversed.decoding.forward as forward

    model = quantize_member(tiny(transformers.LlamaConfig, 2, 1), "int8", anchored=anchored)
    layers = [m for m in model.modules() if isinstance(m, Int8Linear)]
    seen = []
    real = SlotModel.forward

    def spy(self, ids, mask, *args, **kwargs):
        seen.append((bool(mask.all()), {m.short for m in layers}))
        return real(self, ids, mask, *args, **kwargs)

    monkeypatch.setattr(SlotModel, "forward", spy)
    chosen, why, _ = forward._direct_plan(model)
    assert len(layers) == 15 and chosen is not None and "with its 15 int8 layers in float" in why, why
    assert seen and all(not unpadded and shorts == {0} for unpadded, shorts in seen)  # padded, in float
    assert {m.short for m in layers} == {EVERY_CALL if anchored else SHORT_ROWS}
    monkeypatch.setattr(SlotModel, "forward", real)
    ids = torch.randint(3, VOCAB, (2, 5), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    pos = (mask.cumsum(-1) - 1).clamp_min(0)
    with torch.no_grad():
        rounded = SlotModel(model, VOCAB, False, chosen).forward(ids, mask, pos, 5, 5)[0]
        hf = model(input_ids=ids).logits.float()
        with contextlib.ExitStack() as floats:
            for m in layers:
                floats.enter_context(m.float_calls())
            exact = model(input_ids=ids).logits.float()
    torch.testing.assert_close(rounded, hf, rtol=1e-4, atol=1e-4)  # the int8 model, both ways
    assert (rounded - exact).abs().max() > 1e-3  # and not its float counterpart


def test_padding_never_sets_a_real_slots_rounding_on_the_direct_path():
    """Two batches that differ only in the ids at their padding, one of them an id whose embedding is
    all in one channel (after the RMS norm its slots carry an input √hidden = 8 there, against ~2.5 for
    text: they would set the input scale of every projection if they were fed as they are): the text
    slots' logits are the same to the bit."""
    draft = int8_draft()
    loud = VOCAB - 1
    with torch.no_grad():
        row = draft.get_input_embeddings().weight[loud]
        row.zero_()[0] = 1.0
    ids, mask = ragged_prompts(vocab=VOCAB - 1)
    other = ids.masked_fill(mask == 0, loud)
    assert not torch.equal(ids, other)
    pos = (mask.cumsum(-1) - 1).clamp_min(0)
    end = ids.shape[1]
    outs = []
    for x in (ids, other):
        way = SlotModel(draft, VOCAB, False, Plan(draft, True))
        with torch.no_grad():
            outs.append(way.forward(x, mask, pos, end, end)[0][mask.bool()])
    assert torch.equal(outs[0], outs[1])


def test_a_rows_rounding_is_its_own_whatever_the_other_rows_of_the_call():
    """Several rows, each rounded on its own range: a row gives the same beside a row 100 times
    louder as beside a quiet one, close to the float layer on its own scale; with one range per call
    (the kernel alone) the loud row would set the quiet one's rounding."""
    torch.manual_seed(0)
    linear = nn.Linear(64, 48)
    layer = Int8Linear(linear)
    quiet, other, loud = torch.randn(1, 64), torch.randn(1, 64), 100 * torch.randn(1, 64)
    beside_loud = layer(torch.cat([quiet, loud]))[:1]
    torch.testing.assert_close(beside_loud, layer(torch.cat([other, quiet]))[1:], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(layer(torch.cat([loud, quiet]))[1:], beside_loud, rtol=1e-5, atol=1e-6)
    ref = linear(quiet)
    err = (beside_loud - ref).abs().max()
    assert err < 0.05 * ref.abs().max()  # rounded on its own range
    per_call = torch.ops.quantized.linear_dynamic(torch.cat([quiet, loud]), layer.packed, True)[:1]
    assert (per_call + linear.bias - ref).abs().max() > 10 * err  # on the loud row's range
    # one row: the kernel's own rounding, close to the float layer
    assert (layer(quiet) - ref).abs().max() < 0.05 * ref.abs().max()
    torch.testing.assert_close(
        layer(quiet), torch.ops.quantized.linear_dynamic(quiet, layer.packed, True) + linear.bias
    )


def test_an_anchored_rows_product_is_the_same_bits_in_any_call():
    """A target's layer (`anchored`): a row gives the same bits alone (the loop's step), among N + 1
    rows (a verification), beside a row 100 times louder, in a 3-D call and on the direct path; each
    close to the float layer on its own scale. A draft's layer (one row as it
    is) gives a row alone other bits than among others, by whole rounding steps."""
    torch.manual_seed(0)
    linear = nn.Linear(64, 48)
    x_max = torch.rand(64) * 5 + 0.1
    anchored, plain = Int8Linear(linear, x_max=x_max, anchored=True), Int8Linear(linear, x_max=x_max)
    rows = torch.randn(6, 64) * torch.logspace(-1, 2, 6)[:, None]
    rows[2] = 3.0  # a constant row (its range is the smoothing's)
    alone = torch.cat([anchored(r[None]) for r in rows])
    assert torch.equal(anchored(rows), alone)
    assert torch.equal(anchored(rows.view(2, 3, 64)).view(6, 48), alone)
    assert torch.equal(anchored(torch.cat([rows[:1], 100 * rows[5:]]))[:1], alone[:1])
    assert torch.equal(anchored.direct_projection()(rows), alone)
    ref = linear(rows)
    assert ((alone - ref).abs().amax(-1) < 0.05 * ref.abs().amax(-1)).all()  # rounded on its own range
    one = torch.cat([plain(r[None]) for r in rows])
    gap = (plain(rows) - one).abs().amax(-1) / ref.abs().amax(-1)
    assert gap.max() > 1e-3  # unanchored: whole rounding steps apart
    assert "anchored" in repr(anchored) and "anchored" not in repr(plain)


def test_an_anchored_call_feeds_the_kernel_exactly_minus_one_to_one_and_every_call_is_int8(monkeypatch):
    """Whatever the rows (one, a verification's, a prompt pass's 100 > SHORT_ROWS),
    the kernel's input spans exactly [−1, 1] (the two anchors: the range no other row can move), every
    call is int8 (a prompt pass too: no float product is packed for it), a call without rows gives
    none, and a layer of one input channel runs."""
    from diversed.models.packed import kernels, pack_linears

    torch.manual_seed(0)
    layer = Int8Linear(nn.Linear(64, 48), x_max=torch.rand(64) + 0.5, anchored=True)
    assert layer.short == EVERY_CALL and not layer.long_calls
    real, seen = torch.ops.quantized.linear_dynamic, []

    def spy(x, packed, reduce_range):
        seen.append(tuple(float(v) for v in torch.aminmax(x)))
        return real(x, packed, reduce_range)

    monkeypatch.setattr(torch.ops.quantized, "linear_dynamic", spy)
    x = torch.randn(SHORT_ROWS + 36, 64)
    alone = torch.cat([layer(r[None]) for r in x[:8]])
    together = layer(x)
    assert torch.equal(together[:8], alone)
    assert set(seen) == {(-1.0, 1.0)} and len(seen) == 9  # every call int8, on [−1, 1]
    assert layer(x[:0]).shape == (0, 48)
    one = Int8Linear(nn.Linear(1, 3), anchored=True)
    torch.testing.assert_close(
        one(torch.tensor([[2.0]])), one.weight.detach().t() * 2 + one.bias, atol=0.05, rtol=0.05
    )
    import diversed.models.packed as packed

    monkeypatch.setattr(torch.ops.quantized, "linear_dynamic", real)
    monkeypatch.setattr(packed, "CPU_COPY_BYTES", 0)  # pack however small
    draft_layer = Int8Linear(nn.Linear(64, 48))
    pack_linears(nn.Sequential(layer, draft_layer), "auto")
    assert layer.long_product is None and draft_layer.long_product is not None  # a draft's prompt pass
    assert kernels(nn.Sequential(layer)) == "none (int8)" != kernels(nn.Sequential(draft_layer))


@pytest.mark.parametrize("anchored", [True, False])
def test_an_int8_targets_verification_computes_the_loops_p(anchored):
    """What lossless decoding needs of an int8 target: p at a position computed by one-token steps
    (the autoregressive loop) and inside one call over N + 1 = 6 tokens (a verification) agree to float
    ulps where the rows are anchored. With a draft's rounding (one row as it is) the two calls' p
    differ by whole rounding steps: anchoring is what makes them agree."""
    from transformers import DynamicCache

    model = quantize_member(tiny(transformers.LlamaConfig, 2, 0), "int8", anchored=anchored)
    ids = torch.randint(3, VOCAB, (1, 12), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        steps, cache = [], DynamicCache(config=model.config)
        model(input_ids=ids[:, :6], past_key_values=cache, use_cache=True)
        for t in range(6, 12):
            steps.append(
                model(input_ids=ids[:, t : t + 1], past_key_values=cache, use_cache=True).logits[0, -1]
            )
        cache = DynamicCache(config=model.config)
        model(input_ids=ids[:, :6], past_key_values=cache, use_cache=True)
        together = model(input_ids=ids[:, 6:], past_key_values=cache, use_cache=True).logits[0]
    gap = ((torch.stack(steps) - together).abs().max() / together.abs().max()).item()
    if anchored:
        assert gap < 1e-5, gap
    else:
        assert gap > 1e-3, gap


def test_lossless_on_an_int8_target_draws_that_targets_law_not_its_float_twins():
    """Lossless decoding reproduces the target it runs: on an int8 target (anchored, every call int8,
    the prompt pass too) the first token follows the int8 target's p (χ², 4,000 rows), with power
    against its float twin's p (total variation 0.05 here) and the draft's q. Exact greedy tokens
    against the loop are not the test: an attention over N + 1 query rows and one over a single row
    reach a value by float sums in other orders, and rounding to 8 bits can turn those ulps into a
    rounding step (on this tiny model, logits up to 0.2 apart after about 20 steps); a bf16 model's
    two ways differ by as much."""
    from test_engine import chi2_pvalue

    target, draft, twin = int8_target(), int8_draft(), tiny(transformers.LlamaConfig, 2, 0)
    prompt = torch.tensor([[9, 40, 22]])
    out = speculative_generate(
        target,
        draft,
        prompt.expand(4000, -1),
        num_draft_tokens=1,
        max_new_tokens=1,
        do_sample=True,
        generator=torch.Generator().manual_seed(2),
        eos_token_id=[],
    )
    with torch.no_grad():
        p, p_float, q = (m(prompt).logits[0, -1].softmax(-1) for m in (target, twin, draft))
    first = out.sequences[:, -1]
    assert chi2_pvalue(first, p) > 1e-3
    assert chi2_pvalue(first, p_float) < 1e-6 and chi2_pvalue(first, q) < 1e-6


def test_smoothing_is_exact_in_float_and_closer_in_int8():
    """W diag(s) (x / s) = W x: long calls (a prompt pass) are the float layer to the bit and a row's
    float product is unchanged by s; with a few loud input channels (SmolLM2's inputs have them) the
    smoothed int8 layer lands closer to the float one than the plain int8 layer does."""
    torch.manual_seed(0)
    linear = nn.Linear(64, 48)
    loud = torch.ones(64)
    loud[[3, 17]] = 40.0  # two channels 40 times the others
    x = torch.randn(SHORT_ROWS, 64) * loud
    s = smoothing(x.abs().amax(0), linear.weight)
    torch.testing.assert_close((x / s) @ (linear.weight * s).t(), x @ linear.weight.t(), rtol=1e-5, atol=1e-5)
    smoothed, plain = Int8Linear(linear, x_max=x.abs().amax(0)), Int8Linear(linear)
    long = torch.randn(2, SHORT_ROWS, 64) * loud
    assert torch.equal(smoothed(long), linear(long))
    ref = linear(x)
    err = {name: (layer(x) - ref).abs().mean() for name, layer in (("smoothed", smoothed), ("plain", plain))}
    assert err["smoothed"] < 0.5 * err["plain"], err
    for rows in (1, 5):  # the direct path's call is the module's
        assert torch.equal(smoothed.direct_projection()(x[:rows]), smoothed(x[:rows]))


def test_a_quiet_calibration_channel_does_not_blow_up_its_input():
    """A channel that calibration never saw move gets s of at least its neighbours' order: a later
    input there is not divided by ~0 (it would set the whole row's rounding)."""
    x_max = torch.full((64,), 2.0)
    x_max[5] = 0.0
    s = smoothing(x_max, torch.randn(48, 64))
    assert s.min() > 0.05 * s.median()


def test_the_calibration_is_the_fixed_passage_in_the_pairs_tokenizer(toy_tiny_dir):
    """The smoothing reads the same ids whoever loads the pair: two loads smooth alike."""
    from diversed.models.pair import load_pair

    def load(how):
        return load_pair(
            str(toy_tiny_dir / "target"), str(toy_tiny_dir / "draft"), dtype="float32", device="cpu",
            draft_quantize=how,
        )  # fmt: skip

    pair = load("none")
    ids = calibration_ids(pair.draft, pair.tokenizer)
    assert ids.shape[0] == 1 and 0 < ids.shape[1] <= pair.draft.config.max_position_embeddings
    assert pair.tokenizer.decode(ids[0], skip_special_tokens=True).strip()[:40] == CALIBRATION.strip()[:40]
    one, two = ([m.inv_smooth for m in load("int8").draft.modules() if type(m) is Int8Linear] for _ in "12")
    assert len(one) == len(two) > 0 and all(torch.equal(a, b) for a, b in zip(one, two, strict=True))


@pytest.mark.parametrize("n", [1, 4])
def test_lossless_greedy_with_an_int8_draft_is_the_targets_generate(n):
    target = tiny(transformers.LlamaConfig, 2, 0)
    assert_exact(target, int8_draft(), n, 30)


def test_a_sliding_window_pair_with_an_int8_draft_stays_exact_on_the_hf_path():
    extra = {"sliding_window": 4, "head_dim": 16, "layer_types": ["sliding_attention", "full_attention"]}
    target = tiny(transformers.Gemma3TextConfig, 2, 0, **extra)
    draft = quantize_member(tiny(transformers.Gemma3TextConfig, 2, 1, **extra), "int8")
    assert not plan(draft).direct
    ids, mask = ragged_prompts(vocab=VOCAB)
    out = speculative_generate(
        target, draft, ids, mask, num_draft_tokens=3, max_new_tokens=15, eos_token_id=[]
    )
    for i in range(ids.shape[0]):
        alone = ids[i : i + 1, mask[i].bool()]
        ref = target.generate(alone, do_sample=False, max_new_tokens=15, eos_token_id=None, pad_token_id=PAD)
        assert torch.equal(out.sequences[i, ids.shape[1] :], ref[0, alone.shape[1] :]), i


@pytest.mark.parametrize(
    ("device", "dtype", "message"),
    [
        ("cuda", torch.float32, "CPU only"),
        ("cpu", torch.float16, "pair.dtype=float32"),  # (bf16 is taken: its rows are cast, test_packed.py)
    ],
)
def test_what_cannot_run_is_refused_with_the_fix(device, dtype, message):
    with pytest.raises(ConfigError, match=message):
        check_quantize("int8", torch.device(device), dtype)
    with pytest.raises(ConfigError, match="one of"):
        check_quantize("int4", torch.device("cpu"), torch.float32)
    check_quantize("none", torch.device(device), dtype)  # nothing to refuse


def test_load_pair_refuses_before_reading_anything(tmp_path):
    """Directories that do not exist: the quantization setting is what is refused first."""
    with pytest.raises(ConfigError, match="pair.dtype=float32"):
        load_pair(str(tmp_path / "t"), str(tmp_path / "d"), dtype="float16", draft_quantize="int8")


def toy_pair_config(pair_dir, **setting) -> dict:
    """A `load_pair` config of the tiny toy pair with `setting` (draft_quantize=..., target_quantize=...)."""
    target, draft = str(pair_dir / "target"), str(pair_dir / "draft")
    return {"_target_": "diversed.models.pair.load_pair", "target": target, "draft": draft, **setting}


def test_the_pair_records_it_and_a_heads_pair_does_not(toy_tiny_dir):
    from diversed.models.pair import describe_pair

    cfg = toy_pair_config(toy_tiny_dir, draft_quantize="int8")
    card = describe_pair(cfg)
    assert card.identity["draft_quantize"] == scheme("int8") != "int8"  # before the smoothing: "int8"
    assert "SmoothQuant" in scheme("int8") and scheme("none") == "none"
    assert "draft_quantize" not in pair_record(card.identity)
    assert describe_pair({**cfg, "draft_quantize": "none"}).identity["draft_quantize"] == "none"
    pair = load_pair(cfg["target"], cfg["draft"], dtype="float32", device="cpu", draft_quantize="int8")
    assert pair.draft_quantize == "int8"
    assert any(isinstance(m, Int8Linear) for m in pair.draft.modules())
    assert not any(isinstance(m, Int8Linear) for m in pair.target.modules())
    assert "target_quantize" not in card.identity  # absent where none: every key as before the option


def test_an_int8_target_is_another_target_in_the_pairs_identity_not_in_a_heads(toy_tiny_dir):
    from diversed.models.pair import describe_pair

    cfg = toy_pair_config(toy_tiny_dir, target_quantize="int8")
    card = describe_pair(cfg)
    assert card.identity["target_quantize"] == scheme("int8", anchored=True) != scheme("int8")
    assert card.identity["draft_quantize"] == "none"
    assert pair_record(card.identity) == pair_record(
        describe_pair({**cfg, "target_quantize": "none"}).identity
    )
    pair = load_pair(cfg["target"], cfg["draft"], dtype="float32", device="cpu", target_quantize="int8")
    assert pair.target_quantize == "int8" and pair.draft_quantize == "none"
    layers = [m for m in pair.target.modules() if isinstance(m, Int8Linear)]
    assert layers and all(m.anchored for m in layers)
    assert not any(isinstance(m, Int8Linear) for m in pair.draft.modules())
    with pytest.raises(ConfigError, match="pair.target_quantize=int8 takes float32 or bfloat16"):
        load_pair(cfg["target"], cfg["draft"], dtype="float16", target_quantize="int8")


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("pair.draft_quantize", "distill trains the draft's float weights"),
        ("pair.target_quantize", "distill teaches the draft the float target's law"),
    ],
)
def test_distill_refuses_an_int8_draft_or_target(setting, message):
    from hydra import compose, initialize_config_dir

    from diversed import CONFIG_DIR
    from diversed.distill import check_distill

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3", job_name="distill"):
        cfg = compose("distill", overrides=["+experiment=distill_toy", f"{setting}=int8"])
    with pytest.raises(ConfigError, match=message):
        check_distill(cfg)


def test_the_bench_records_it_and_refuses_it_in_float16(toy_tiny_dir, tmp_path, capsys):
    from diversed.bench import run

    pair = ["--target", str(toy_tiny_dir / "target"), "--draft", str(toy_tiny_dir / "draft")]
    out = tmp_path / "bench.json"
    small = ["-N", "2", "--batch-sizes", "2", "--num-prompts", "2", "--max-new-tokens", "3"]
    run([*pair, *small, "--repeats", "1", "--warmup", "0", "--only", "diversed lossless", "target (loop)",
         "--draft-quantize", "int8", "--output", str(out)])  # fmt: skip
    records = json.loads(out.read_text())
    assert {r["draft_quantize"] for r in records} == {"int8"} and {r["dtype"] for r in records} == {"float32"}
    assert {r["quantize_scheme"] for r in records} == {scheme("int8")}
    assert "the draft's linear layers and head int8" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="--draft-quantize int8 takes float32 or bfloat16"):
        run([*pair, "--dtype", "float16", "--draft-quantize", "int8"])
    assert (
        {r["target_quantize"] for r in records} == {"none"} == {r["target_quantize_scheme"] for r in records}
    )
    run([*pair, *small, "--repeats", "1", "--warmup", "0", "--only", "diversed lossless", "target (loop)",
         "--target-quantize", "int8", "--output", str(out)])  # fmt: skip
    records = json.loads(out.read_text())
    assert {r["target_quantize"] for r in records} == {"int8"} and {r["draft_quantize"] for r in records} == {
        "none"
    }
    assert {r["target_quantize_scheme"] for r in records} == {scheme("int8", anchored=True)}
    assert "the target's int8 at every call, prompt passes included" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="--target-quantize int8 takes float32 or bfloat16"):
        run([*pair, "--dtype", "float16", "--target-quantize", "int8"])


def test_a_fine_tuned_draft_in_a_sweep_is_int8_where_the_pairs_draft_is(tmp_path):
    """The fine-tuned-draft baseline costs what the pair's draft costs."""
    from types import SimpleNamespace

    from diversed.sweep.point import load_drafts

    target = tiny(transformers.LlamaConfig, 2, 0)
    tiny(transformers.LlamaConfig, 1, 1).save_pretrained(tmp_path / "ft")
    for how, kind in (("int8", Int8Linear), ("none", nn.Linear)):
        pair = SimpleNamespace(target=target, device=torch.device("cpu"), forward="auto", draft_quantize=how)
        loaded = load_drafts([str(tmp_path / "ft")], pair)[str(tmp_path / "ft")]
        assert type(loaded.model.layers[0].mlp.up_proj) is kind
        assert type(loaded.get_output_embeddings()) is kind


@pytest.mark.parametrize("setting", ["pair.draft_quantize", "pair.target_quantize"])
def test_training_refuses_it_under_mixed_precision_and_takes_it_in_float32(setting):
    from hydra import compose, initialize_config_dir

    from diversed import CONFIG_DIR
    from diversed.train import check_train

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3", job_name="train"):
        cfg = compose("train", overrides=["+experiment=toy", f"{setting}=int8"])
        check_train(cfg)  # 32-true
        cfg = compose(
            "train", overrides=["+experiment=toy", f"{setting}=int8", "trainer.precision=bf16-mixed"]
        )
    with pytest.raises(ConfigError, match=f"{setting}=int8 with trainer.precision.*32-true"):
        check_train(cfg)
