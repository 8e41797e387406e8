"""The real demo's SmolLM2 protocol without weights: the XSum rows its knob families are chosen on are
none of the rows the draft's distillation or the head trained on or picked checkpoints with, under the
very settings those runs compose; and its undistilled draft is the target cut to the built draft's
layers, with the built draft's vocabulary."""

from __future__ import annotations

import importlib.util
import random
import shutil
import sys
from pathlib import Path

import pytest
import torch
from tiny_models import tiny_pair

ROOT = Path(__file__).resolve().parents[1]

# XSum's train split on the Hub, and sizes about those of scripts/real_data.py's 80 % of 1,000 articles
SIZES = (204_045, 800, 797, 812)


@pytest.fixture(scope="module")
def demo():
    if str(ROOT / "scripts") not in sys.path:  # demo_real imports demo, as when run as a script
        sys.path.insert(0, str(ROOT / "scripts"))
    spec = importlib.util.spec_from_file_location("demo_real_script", ROOT / "scripts" / "demo_real.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _composed(config: str, overrides: list[str]):
    from hydra import compose, initialize_config_dir

    from diversed import CONFIG_DIR

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose(config, overrides=overrides)


def _holdout(n_rows: int, data) -> set[int]:
    """The rows `PromptDataModule._held_out` gives a run of `data` (its n_val, n_train, seed), written
    out here from its rule: a shuffle by "holdout-<seed>", n_val held out, the next n_train trained on."""
    order = list(range(n_rows))
    random.Random(f"holdout-{data.seed}").shuffle(order)
    assert data.val_split == "holdout"
    return set(order[: data.n_val + data.n_train])


@pytest.mark.parametrize("n_rows", SIZES)
def test_knob_rows_are_apart_from_every_training_row(demo, n_rows):
    from diversed.drafts import RECIPES

    recipe = RECIPES["smollm2"]
    extra = next(o for task, _, o in recipe.stages if task == "xsum")
    # the draft's XSum stage, as drafts.distill_stage composes it; the head, as the demo's step 2 does
    draft = _composed("distill", ["task=xsum", *recipe.overrides, *extra]).data
    head = _composed(
        "train",
        ["+experiment=smollm2", f"data.n_val={demo.HEAD_VAL_ROWS}", f"data.n_train={demo.HEAD_TRAIN_ROWS}"],
    ).data
    seen = _holdout(n_rows, draft) | _holdout(n_rows, head)
    assert demo.trained_rows(n_rows) == seen
    assert len(seen) == 408  # the head's rows are the draft's: 400 trained on, 8 picking checkpoints
    rows = demo.knob_rows(n_rows, 24)
    assert len(set(rows)) == 24 and not set(rows) & seen and all(0 <= i < n_rows for i in rows)
    assert rows == demo.knob_rows(n_rows, 24)  # the same rows every run (a resumed sweep's)


def test_the_old_knob_rows_were_not_apart(demo):
    """What this protects against: the first 24 train rows of the task's own seed-0 subset, where the
    knobs used to be chosen, share rows with the draft's distillation rows."""
    from diversed.tasks.data import subset_indices

    old = set(subset_indices(800, 24, 0))
    assert old & demo.trained_rows(800)


def test_the_undistilled_draft_is_the_cut_target_with_the_built_drafts_vocabulary(
    demo, toy_tiny_dir, tmp_path, monkeypatch
):
    from transformers import AutoModelForCausalLM

    import diversed.drafts as drafts
    import diversed.models.gguf as gguf
    from diversed.decoding import draft_vocab
    from diversed.models.surgery import cut_layers

    target_dir = tmp_path / "target"  # a 3-layer target with a tokenizer (the toy's)
    tiny_pair()[0].save_pretrained(target_dir)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(toy_tiny_dir / "target" / name, target_dir / name)
    target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32)
    layers = 2
    built = tmp_path / "built"
    distilled = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32)
    index = torch.tensor([0, 1, 2, 5, 7, 11, 13])
    draft_vocab.restrict(cut_layers(distilled, layers), index)
    draft_vocab.save_pretrained(distilled, built)
    monkeypatch.setattr(drafts, "built_dir", lambda name: built)
    monkeypatch.setattr(gguf, "resolve_model", lambda name, role="model": str(target_dir))

    out = demo.undistilled_draft(tmp_path / "undistilled")
    model = draft_vocab.attach(AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32), out)
    assert model.config.num_hidden_layers == layers
    assert torch.equal(model.get_output_embeddings().index, index)
    kept = {k: v for k, v in target.state_dict().items() if not k.startswith("lm_head")}
    for k, v in model.state_dict().items():
        if k in kept:
            assert torch.equal(v, kept[k]), k  # the target's own weights: nothing distilled
    head = model.get_output_embeddings().weight
    assert torch.equal(head, target.get_output_embeddings().weight[index])
    assert demo.undistilled_draft(tmp_path / "undistilled") == out  # made once
