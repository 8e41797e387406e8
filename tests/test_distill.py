"""Distilling the draft towards the target: the divergences, a short run end to end, LoRA."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file
from tiny_models import compose_run, tiny_pair

from diversed.decoding.verify import total_variation
from diversed.distill import distill
from diversed.training.teacher import TeacherSample, divergence

SMALL = [
    "+experiment=distill_toy",
    "logger=none",
    "trainer.max_steps=6",
    "trainer.val_check_interval=3",
    "trainer.enable_progress_bar=false",
    "data.batch_size=8",
    "data.n_val=16",
    "data.val_batch_size=16",
    "data.n_train=64",
    "distill.max_new_tokens=8",
    "distill.optimizer.lr=0.02",
    "distill.divergence=tvd",
]


def test_divergences_are_what_they_say_and_pull_q_towards_p():
    g = torch.Generator().manual_seed(0)
    p_logits, q_logits = torch.randn(5, 40, generator=g) * 2, torch.randn(5, 40, generator=g) * 2
    p, q = p_logits.softmax(-1), q_logits.softmax(-1)
    assert torch.allclose(
        divergence(p_logits, q_logits, "forward_kl"), (p * (p / q).log()).sum(-1), atol=1e-5
    )
    assert torch.allclose(
        divergence(p_logits, q_logits, "reverse_kl"), (q * (q / p).log()).sum(-1), atol=1e-5
    )
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


def mean_tv(pair_dir, draft_dir, n=64):
    """Mean TV(p, q) over held-out toy prompts and their references, teacher-forced: 1 − acceptance
    without sampling noise."""
    from diversed.models.pair import load_pair
    from diversed.tasks import load_task

    pair = load_pair(str(pair_dir / "target"), str(draft_dir), device="cpu", dtype="float32")
    task = load_task("toy", split="validation", n_examples=n)
    tvs = []
    with torch.no_grad():
        for e in task.examples:
            ids = torch.tensor([pair.tokenizer(task.prompt(e) + task.target(e))["input_ids"]])
            tvs.append(
                total_variation(
                    pair.target(ids).logits.softmax(-1), pair.draft(ids).logits.softmax(-1)
                ).mean()
            )
    return float(torch.stack(tvs).mean())


def resumable(cfg, last):
    """`ckpt_path=last` passes the check a resume makes before the pair loads, with every draft tensor
    compared."""
    from diversed.models.pair import describe_pair
    from diversed.training.checkpoints import check_checkpoint, model_shapes

    expected = {f"draft.{k}": s for k, s in model_shapes(describe_pair(cfg.pair), "draft").items()}
    check_checkpoint(str(last), expected, "draft", weights_only=False)
    wrong = {k: (s[0] + 1, *s[1:]) for k, s in expected.items()}
    with pytest.raises(ValueError, match="saved for another draft"):
        check_checkpoint(str(last), wrong, "draft", weights_only=False)


def test_a_short_distillation_raises_acceptance_and_saves_a_loadable_draft(tmp_path, toy_tiny_dir):
    cfg = compose_run("distill", tmp_path / "run", toy_tiny_dir, SMALL)
    result = distill(cfg)
    draft = tmp_path / "run" / "draft"
    assert result["draft_dir"] == str(draft)
    assert (draft / "model.safetensors").is_file() and (draft / "tokenizer_config.json").is_file()
    assert 0 <= result["metrics"]["val/acceptance_rate"] <= 1
    ckpt = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert all(k.startswith("draft.") for k in ckpt["state_dict"])  # never the target
    resumable(cfg, tmp_path / "run" / "checkpoints" / "last.ckpt")
    # teacher-forced TV, 1 − acceptance without the sampling noise (a sampled acceptance over 48 toy
    # prompts moves by ±0.03 from one training seed to the next: 6 steps do not raise it past that)
    before, after = mean_tv(toy_tiny_dir, toy_tiny_dir / "draft"), mean_tv(toy_tiny_dir, draft)
    assert after < before - 0.005, (before, after)


def test_lora_trains_adapters_only_and_saves_them_merged(tmp_path, toy_tiny_dir):
    pytest.importorskip("peft")
    cfg = compose_run(
        "distill",
        tmp_path / "run",
        toy_tiny_dir,
        SMALL,
        ["+distill.lora={r: 4, alpha: 8, target_modules: [q_proj, v_proj]}"],
    )
    distill(cfg)
    resumable(cfg, tmp_path / "run" / "checkpoints" / "last.ckpt")  # LoRA's wrapped names too
    saved = load_file(tmp_path / "run" / "draft" / "model.safetensors")
    base = load_file(toy_tiny_dir / "draft" / "model.safetensors")
    assert set(saved) == set(base)  # merged: no adapter tensors left
    changed = {k for k in base if not torch.equal(base[k], saved[k])}
    assert changed and all(("q_proj" in k or "v_proj" in k) for k in changed), changed


def test_bad_distill_settings_fail_before_the_pair_loads(tmp_path, toy_tiny_dir, monkeypatch):
    from transformers import PreTrainedModel

    monkeypatch.setattr(
        PreTrainedModel, "from_pretrained", classmethod(lambda *a, **k: pytest.fail("weights read"))
    )
    for override, message in (
        ("distill.divergence=js", "distill.divergence"),
        ("distill.rollout=both", "rollout"),
        ("distill.mixed_fraction=2", "mixed_fraction"),
    ):
        with pytest.raises(ValueError, match=message):
            distill(compose_run("distill", tmp_path / "run", toy_tiny_dir, SMALL, [override]))


# ----------------------------------------------------------------------------- the coarsened teacher


@pytest.mark.parametrize("support", [None, torch.tensor([0, 3, 4, 7, 9, 12, 20, 33, 39])])
def test_the_coarsened_divergences_are_exact_with_every_id_and_never_larger_with_fewer(support):
    from diversed.training.teacher import coarse_divergence, teacher_top

    g = torch.Generator().manual_seed(1)
    p_logits, q_full = torch.randn(6, 40, generator=g) * 2, torch.randn(6, 40, generator=g) * 2
    if support is None:
        q_support, q_logits = q_full, q_full
    else:  # a restricted draft: logits over S only; the full row is −inf outside S (q = 0 exactly)
        q_support = q_full[:, support]
        q_logits = torch.full_like(q_full, float("-inf"))
        q_logits[:, support] = q_support
    size = 40 if support is None else len(support)
    for kind in ("forward_kl", "tvd", "reverse_kl"):
        exact = divergence(p_logits, q_logits, kind)
        every = coarse_divergence(teacher_top(p_logits, support, size), q_support, kind)
        assert torch.allclose(every, exact, atol=1e-5), kind
        for k in (1, 3, size - 1):  # coarsening to k + 1 outcomes never raises an f-divergence
            coarse = coarse_divergence(teacher_top(p_logits, support, k), q_support, kind)
            # (over a restricted support, forward KL sums p log(p/q) over S only: it can go below 0)
            floor = -1e-6 if support is None or kind != "forward_kl" else float("-inf")
            assert (coarse <= exact + 1e-4).all() and (coarse >= floor).all(), (kind, k)
            q_var = q_support.clone().requires_grad_(True)  # and a gradient step on q lowers it
            before = coarse_divergence(teacher_top(p_logits, support, k), q_var, kind).sum()
            before.backward()
            assert torch.isfinite(q_var.grad).all()
            after = coarse_divergence(
                teacher_top(p_logits, support, k), q_support - 0.2 * q_var.grad, kind
            ).sum()
            assert after < before, (kind, k)


def test_the_coarsened_teacher_keeps_the_rest_mass_so_q_cannot_drop_the_tail():
    from diversed.training.teacher import coarse_divergence, teacher_top

    p = torch.tensor([[0.5, 0.2, 0.1, 0.1, 0.1]])
    teacher = teacher_top(p.log(), None, 2)
    assert torch.allclose(teacher.logp.exp(), torch.tensor([[0.5, 0.2]])) and teacher.ids.tolist() == [[0, 1]]
    assert torch.allclose(teacher.rest.exp(), torch.tensor([0.3]))
    # q right on the top two ids' relative sizes but with no tail: penalised; q = p is not
    no_tail = torch.tensor([[5 / 7, 2 / 7, 1e-6, 1e-6, 1e-6]]).log()
    assert coarse_divergence(teacher, no_tail, "forward_kl") > 0.3
    assert coarse_divergence(teacher, p.log(), "forward_kl").abs() < 1e-6
    assert coarse_divergence(teacher, p.log(), "tvd").abs() < 1e-6


def test_reused_samples_are_drawn_once_kept_in_the_run_and_raise_acceptance(
    tmp_path, toy_tiny_dir, monkeypatch
):
    from diversed.training.draft_module import DistillModule

    # top_k ≥ the toy vocabulary (137 ids): the coarsening is exact (its own tests are above), so this
    # checks reuse alone. 16 steps of 8 rows: each of the 64 samples twice.
    reuse = [
        "distill.rollout=target",
        "distill.reuse=true",
        "distill.top_k=139",
        "trainer.max_steps=16",
        "distill.optimizer.lr=0.005",
        "distill.divergence=forward_kl",
        "distill.sample_batch_size=16",
        "distill.prompt_positions=-1",
    ]
    cfg = compose_run("distill", tmp_path / "run", toy_tiny_dir, SMALL, reuse)
    rollouts = []
    real = DistillModule.rollout
    monkeypatch.setattr(
        DistillModule,
        "rollout",
        lambda self, task, ex, *record: rollouts.append(len(ex)) or real(self, task, ex, *record),
    )
    distill(cfg)
    assert sum(rollouts) == 64 and max(rollouts) == 16  # every train prompt once, 16 at a time
    samples = torch.load(tmp_path / "run" / "teacher_samples.pt", weights_only=True)
    assert len(samples["ids"]) == 64 and all(t.shape[-1] == 137 for t in samples["top"])
    assert all(
        len(at) == len(ids) - 1 for at, ids in zip(samples["at"], samples["ids"], strict=True)
    )  # every slot
    before, after = (
        mean_tv(toy_tiny_dir, toy_tiny_dir / "draft"),
        mean_tv(toy_tiny_dir, tmp_path / "run" / "draft"),
    )
    assert after < before - 0.01, (before, after)
    # a second run on the same directory reads the samples instead of drawing them
    rollouts.clear()
    distill(compose_run("distill", tmp_path / "run", toy_tiny_dir, SMALL, reuse))
    assert rollouts == []
    # replay: another run trains on its own samples and these
    from diversed.training.prompts import PromptDataModule

    served = []
    real_serve = PromptDataModule.serve
    monkeypatch.setattr(
        PromptDataModule, "serve", lambda self, items: served.append(len(items)) or real_serve(self, items)
    )
    distill(
        compose_run(
            "distill",
            tmp_path / "other",
            toy_tiny_dir,
            SMALL,
            [*reuse, f"distill.replay=[{tmp_path / 'run' / 'teacher_samples.pt'}]"],
        )
    )
    assert served == [128]


def test_frozen_bottom_layers_and_embeddings_do_not_move_and_the_rest_trains():
    from diversed.training.draft_module import freeze_bottom

    model, _ = tiny_pair()  # 3 layers
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.requires_grad_(True)
    freeze_bottom(model, 2)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    ids = torch.randint(3, 96, (2, 7))
    model(ids, labels=ids).loss.backward()
    opt.step()
    after = model.state_dict()
    frozen = {k for k in before if k.startswith(("model.layers.0.", "model.layers.1.", "model.embed_tokens"))}
    assert all(torch.equal(before[k], after[k]) for k in frozen)
    assert all(
        not torch.equal(before[k], after[k])
        for k in before
        if k.startswith("model.layers.2.") and "weight" in k
    )
    with pytest.raises(ValueError, match="freeze_layers=4"):
        freeze_bottom(model, 4)


def test_reuse_settings_are_checked_before_the_pair_loads(tmp_path, toy_tiny_dir, monkeypatch):
    from transformers import PreTrainedModel

    monkeypatch.setattr(
        PreTrainedModel, "from_pretrained", classmethod(lambda *a, **k: pytest.fail("weights read"))
    )
    for override, message in (
        (["distill.reuse=true", "distill.top_k=8"], "rollout=target"),
        (["distill.reuse=true", "distill.rollout=target"], "top_k"),
        (["distill.replay=[/nonexistent/teacher_samples.pt]"], "reuse"),
        (
            [
                "distill.reuse=true",
                "distill.rollout=target",
                "distill.top_k=8",
                "distill.replay=[/nonexistent/teacher_samples.pt]",
            ],
            "no file",
        ),
    ):
        with pytest.raises(ValueError, match=message):
            distill(compose_run("distill", tmp_path / "run", toy_tiny_dir, SMALL, override))


# ----------------------------------------------------------------------------- resumed = uninterrupted


RESUMABLE = [
    "trainer.max_steps=9",
    "callbacks.last_checkpoint.every_n_train_steps=2",
    "data.n_train=32",
]  # 4 batches an epoch
VARIANTS = {
    "on-policy": [],
    "mixed": ["distill.rollout=mixed", "distill.prompt_positions=3"],  # random source and slots
    "reuse": ["distill.rollout=target", "distill.reuse=true", "distill.top_k=139"],
}  # length-grouped rows


@pytest.mark.parametrize(
    ("variant", "step"), [("on-policy", 3), ("on-policy", 5), ("mixed", 3), ("reuse", 7)]
)
def test_a_resumed_distillation_is_the_run_it_continues(variant, step, tmp_path, toy_tiny_dir, monkeypatch):
    """Killed mid-epoch (step 3, 7) or after an epoch (step 5: last.ckpt of step 4), resumed in place
    from last.ckpt: the draft, its optimizer, the export, the best step and the metrics are the
    uninterrupted run's, bit for bit."""
    from resuming import Killed, assert_resumed_is_uninterrupted, kill_at

    from diversed.training.draft_module import DistillModule

    overrides = [*RESUMABLE, *VARIANTS[variant], "logger=csv"]
    ref = tmp_path / "uninterrupted"
    ref_result = distill(compose_run("distill", ref, toy_tiny_dir, SMALL, overrides))
    run = tmp_path / "run"
    with monkeypatch.context() as m:
        kill_at(m, DistillModule, "on_train_batch_start", step)
        with pytest.raises(Killed):
            distill(compose_run("distill", run, toy_tiny_dir, SMALL, overrides))
    last = run / "checkpoints" / "last.ckpt"
    result = distill(compose_run("distill", run, toy_tiny_dir, SMALL, [*overrides, f"ckpt_path={last}"]))
    assert_resumed_is_uninterrupted(ref, run, result, ref_result, "draft/model.safetensors")


def _bottom_models():
    import transformers

    llama, _ = tiny_pair(layers=3)
    config = transformers.Gemma3TextConfig(
        vocab_size=96,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        sliding_window=4,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        max_position_embeddings=256,
        initializer_range=0.2,
        pad_token_id=0,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    gemma = transformers.AutoModelForCausalLM.from_config(config).eval()
    return {"llama": llama, "gemma3 (sliding, scaled embeddings)": gemma}


@pytest.mark.parametrize("family", ["llama", "gemma3 (sliding, scaled embeddings)"])
@pytest.mark.parametrize("layers", [1, 2])
def test_a_frozen_bottom_computed_once_gives_the_whole_forwards_logits_and_gradients(family, layers):
    from diversed.training.draft_module import FrozenBottom, freeze_bottom, right_padded

    model = _bottom_models()[family].train()
    model.requires_grad_(True)
    freeze_bottom(model, layers)
    g = torch.Generator().manual_seed(3)
    rows = [torch.randint(3, 96, (n,), generator=g) for n in (9, 4, 7)]  # right padding, ragged
    ids, mask = right_padded(rows, 0, torch.device("cpu"))
    bottom = FrozenBottom(model, layers)
    whole = model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp_min(0)).logits
    states = bottom.states(ids, mask)
    assert not states.requires_grad and len(model.model.layers) == 3  # the layers are put back
    cut = bottom.top(states, mask)
    text = mask.bool()
    torch.testing.assert_close(cut[text], whole[text], atol=1e-5, rtol=1e-5)
    grads = []
    for logits in (whole, cut):
        model.zero_grad()
        logits[text].logsumexp(-1).sum().backward()
        grads.append({k: p.grad.clone() for k, p in model.named_parameters() if p.requires_grad})
    assert grads[0].keys() == grads[1].keys() and grads[0]
    for k in grads[0]:
        torch.testing.assert_close(grads[1][k], grads[0][k], atol=1e-5, rtol=1e-4)
    assert bottom.check([TeacherSample(r, 2, torch.arange(len(r) - 1), None) for r in rows], 0) is None


def test_a_bottom_that_does_not_cut_is_run_whole_and_said(caplog):
    """A model whose forward changes `inputs_embeds` (as Gemma-2 scales them in its forward): the cut
    would be wrong, so every step runs the whole draft."""
    from diversed.training.draft_module import FrozenBottom, freeze_bottom

    model, _ = tiny_pair(layers=3)
    freeze_bottom(model, 1)

    def scaled(module, args, kwargs):
        if kwargs.get("inputs_embeds") is not None:
            kwargs["inputs_embeds"] = kwargs["inputs_embeds"] * 8.0
        return args, kwargs

    model.model.register_forward_pre_hook(scaled, with_kwargs=True)
    samples = [TeacherSample(torch.arange(3, 3 + n), 2, torch.arange(n - 1), None) for n in (5, 8)]
    with caplog.at_level("WARNING"):
        out = FrozenBottom(model, 1).attach(samples, 0)
    assert all(s.bottom is None for s in out)
    assert "differ from the whole forward" in caplog.text


def test_a_distillation_with_a_frozen_bottom_computed_once_trains_the_same_draft(
    tmp_path, toy_tiny_dir, monkeypatch, caplog
):
    from diversed.training.draft_module import DistillModule, FrozenBottom

    reuse = [
        "distill.rollout=target",
        "distill.reuse=true",
        "distill.top_k=139",
        "trainer.max_steps=4",
        "trainer.val_check_interval=4",
        "distill.optimizer.lr=0.005",
        "distill.divergence=forward_kl",
        "distill.sample_batch_size=32",
        "distill.prompt_positions=-1",
        "distill.freeze_layers=1",
    ]
    steps = []
    real = DistillModule.step_on_samples
    monkeypatch.setattr(
        DistillModule,
        "step_on_samples",
        lambda self, batch: steps.append(batch[0].bottom is not None) or real(self, batch),
    )
    with caplog.at_level("INFO"):
        distill(compose_run("distill", tmp_path / "cached", toy_tiny_dir, SMALL, reuse))
    assert steps == [True] * 4 and "computed once" in caplog.text
    steps.clear()
    monkeypatch.setattr(FrozenBottom, "check", lambda self, samples, pad: "turned off by the test")
    distill(compose_run("distill", tmp_path / "whole", toy_tiny_dir, SMALL, reuse))
    assert steps == [False] * 4
    cached, whole = (load_file(tmp_path / run / "draft" / "model.safetensors") for run in ("cached", "whole"))
    assert cached.keys() == whole.keys()
    moved = 0
    for k in whole:
        torch.testing.assert_close(cached[k], whole[k], atol=1e-5, rtol=1e-4)
        moved += not torch.equal(whole[k], load_file(toy_tiny_dir / "draft" / "model.safetensors")[k])
    assert moved  # the top trained
