"""An int8 draft (`pair.draft_quantize=int8`, models/quantize.py): its layers and its head are int8,
smoothed on a fixed passage (exact in float, closer to the float layer in int8), the engine's direct
path runs it and agrees with its modules, padding never sets a real slot's rounding there, lossless
decoding stays exactly the target's, and a setting that cannot run is refused before any weights are
read."""

from __future__ import annotations

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
    SHORT_ROWS,
    Int8Linear,
    calibration_ids,
    check_quantize,
    quantize_draft,
    scheme,
    smoothing,
)


def int8_draft(layers: int = 2, seed: int = 1, **extra):
    return quantize_draft(tiny(transformers.LlamaConfig, layers, seed, **extra), "int8")


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
    quantize_draft(draft, "int8")
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


def test_the_path_check_feeds_an_int8_draft_unpadded_rows_and_a_float_model_padded_ones(monkeypatch):
    """Rounding to 8 bits turns the ulps by which model(...) and the direct way differ on a padded
    batch into whole rounding steps (SmolLM2's int8 draft: logits 1.2 apart), so the direct path's
    check runs an int8 draft on unpadded rows; a float model is checked with padding and a hole."""
    import diversed.decoding.forward as forward

    seen = []
    real = SlotModel.forward

    def spy(self, ids, mask, *args, **kwargs):
        seen.append(bool(mask.all()))
        return real(self, ids, mask, *args, **kwargs)

    monkeypatch.setattr(SlotModel, "forward", spy)
    for model, unpadded in ((int8_draft(), True), (tiny(transformers.LlamaConfig, 2, 1), False)):
        seen.clear()
        chosen, why, _ = forward._direct_plan(model)
        assert chosen is not None, why
        assert seen and all(s == unpadded for s in seen)


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
    draft = quantize_draft(tiny(transformers.Gemma3TextConfig, 2, 1, **extra), "int8")
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


def test_the_pair_records_it_and_a_heads_pair_does_not(toy_tiny_dir):
    from diversed.models.pair import describe_pair

    cfg = {
        "_target_": "diversed.models.pair.load_pair",
        "target": str(toy_tiny_dir / "target"),
        "draft": str(toy_tiny_dir / "draft"),
        "draft_quantize": "int8",
    }
    card = describe_pair(cfg)
    assert card.identity["draft_quantize"] == scheme("int8") != "int8"  # before the smoothing: "int8"
    assert "SmoothQuant" in scheme("int8") and scheme("none") == "none"
    assert "draft_quantize" not in pair_record(card.identity)
    assert describe_pair({**cfg, "draft_quantize": "none"}).identity["draft_quantize"] == "none"
    pair = load_pair(cfg["target"], cfg["draft"], dtype="float32", device="cpu", draft_quantize="int8")
    assert pair.draft_quantize == "int8"
    assert any(isinstance(m, Int8Linear) for m in pair.draft.modules())
    assert not any(isinstance(m, Int8Linear) for m in pair.target.modules())


def test_distill_refuses_an_int8_draft():
    from hydra import compose, initialize_config_dir

    from diversed import CONFIG_DIR
    from diversed.distill import check_distill

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3", job_name="distill"):
        cfg = compose("distill", overrides=["+experiment=distill_toy", "pair.draft_quantize=int8"])
    with pytest.raises(ConfigError, match="distill trains the draft's float weights"):
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


def test_training_refuses_it_under_mixed_precision_and_takes_it_in_float32():
    from hydra import compose, initialize_config_dir

    from diversed import CONFIG_DIR
    from diversed.train import check_train

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3", job_name="train"):
        cfg = compose("train", overrides=["+experiment=toy", "pair.draft_quantize=int8"])
        check_train(cfg)  # 32-true
        cfg = compose(
            "train", overrides=["+experiment=toy", "pair.draft_quantize=int8", "trainer.precision=bf16-mixed"]
        )
    with pytest.raises(ConfigError, match="trainer.precision=32-true"):
        check_train(cfg)
