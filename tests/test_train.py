"""Training the weight head: signs of the gradients, and `train(cfg)` end to end on a tiny pair."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from hydra import compose, initialize_config_dir
from resuming import Killed, assert_resumed_is_uninterrupted, kill_at
from tiny_models import compose_run, pair_overrides, tiny_pair

from diversed import CONFIG_DIR, WeightHead
from diversed.train import train
from diversed.training.head_module import DiversedModule
from diversed.training.reinforce import policy_loss


def sgd_step(head, loss_fn, lr=0.5):
    opt = torch.optim.SGD(head.parameters(), lr=lr)
    opt.zero_grad()
    loss_fn().backward()
    opt.step()


# ----------------------------------------------------------------------------- signs


def test_regulariser_alone_lowers_w_where_models_differ():
    torch.manual_seed(0)
    head = WeightHead(8, 12)
    h_d, h_t = torch.randn(4, 10, 8), torch.randn(4, 10, 12)
    tv = torch.rand(4, 10) * (torch.rand(4, 10) > 0.3)  # p != q at ~70% of positions
    mask = torch.ones(4, 10, dtype=torch.bool)
    p_x = q_x = torch.full((4, 10), 0.1)
    zero = torch.zeros(4)
    before = head(h_d, h_t).detach()
    sgd_step(head, lambda: policy_loss(head(h_d, h_t), p_x, q_x, tv, mask, zero, 1.0)[0])
    after = head(h_d, h_t).detach()
    differ = tv > 0
    assert after[differ].mean() < before[differ].mean()
    assert (after[differ] < before[differ]).float().mean() > 0.9


def module_for(pair):
    target, draft = pair
    head = WeightHead(draft.config.hidden_size, target.config.hidden_size)
    ns = SimpleNamespace(target=target, draft=draft, tokenizer=None, name="tiny")
    return DiversedModule(head, torch.optim.SGD, pair=ns, reg_scale=0.0)


def test_reward_alone_raises_w_where_target_token_is_paid():
    """Two completions of one prompt: the target's greedy tokens (reward 1) and the draft's (reward 0).
    A policy-gradient step must raise w at the positions where the two models disagree."""
    target, draft = pair = tiny_pair(seed=5)
    module = module_for(pair)
    prompt = torch.tensor([[7, 30, 12, 55]])
    gen = {}
    for name, m in (("target", target), ("draft", draft)):
        gen[name] = m.generate(prompt, do_sample=False, max_new_tokens=12, eos_token_id=None, pad_token_id=0)
    seqs = torch.cat([gen["target"], gen["draft"]])
    P = prompt.shape[1]
    prompt_mask = torch.ones(2, P, dtype=torch.long)
    new = torch.full((2,), 12)
    p_x, q_x, tv, h_d, h_t, mask, _ = module.score_tokens(seqs, prompt_mask, new, 1.0)
    disagree = (p_x > q_x)[0] & (seqs[0, P:] != seqs[1, P:])  # target's token, less likely under q
    assert disagree.sum() >= 2
    reward = torch.tensor([1.0, 0.0])
    advantage = reward - reward.mean()
    head = module.head
    before = head(h_d, h_t).detach()
    sgd_step(head, lambda: policy_loss(head(h_d, h_t), p_x, q_x, tv, mask, advantage, 0.0)[0], lr=0.05)
    after = head(h_d, h_t).detach()
    assert after[0][disagree].mean() > before[0][disagree].mean()


def test_loss_masks_padding():
    w = torch.full((2, 5), 0.5, requires_grad=True)
    p_x, q_x, tv = torch.rand(2, 5), torch.rand(2, 5), torch.rand(2, 5)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    loss, _, _ = policy_loss(w, p_x, q_x, tv, mask, torch.tensor([1.0, -1.0]), 0.3)
    loss.backward()
    assert (w.grad[0, 3:] == 0).all() and (w.grad[0, :3] != 0).all()


def test_teacher_forced_rows_score_a_completion_as_its_unpadded_row_does():
    """The layout both training modules score with: left padding and the slots past a row's
    completion change neither its positions nor the logits predicting its completion tokens."""
    from diversed.training.pair_module import teacher_forced

    target, _ = tiny_pair(seed=2)
    prompts, completions = [[7, 30, 12, 55, 9], [40, 41]], [[11, 12, 13, 14], [20, 21]]
    P, C = 5, 4
    sequences = torch.zeros(2, P + C, dtype=torch.long)
    prompt_mask = torch.zeros(2, P, dtype=torch.long)
    for b, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
        sequences[b, P - len(prompt) : P], prompt_mask[b, P - len(prompt) :] = torch.tensor(prompt), 1
        sequences[b, P : P + len(completion)] = torch.tensor(completion)
    inputs, comp_mask = teacher_forced(sequences, prompt_mask, torch.tensor([4, 2]))
    assert comp_mask.tolist() == [[True] * 4, [True, True, False, False]]
    assert inputs["position_ids"][1].tolist() == [0, 0, 0, 0, 1, 2, 3, 3, 3]
    with torch.no_grad():
        logits = target(**inputs).logits
        for b, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
            alone = target(torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1]
            assert torch.allclose(logits[b, P - 1 : P - 1 + len(completion)], alone, atol=1e-5)


# ----------------------------------------------------------------------------- configs


@pytest.mark.parametrize("experiment", ["toy", "llama8b_1b", "qwen3_8b_0p6b"])
def test_experiments_compose(experiment):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose(
            "train", overrides=[f"+experiment={experiment}", "model.reg_scale=0.05"], return_hydra_config=True
        )
    assert cfg.model.reg_scale == 0.05
    assert "_target_" in cfg.pair and "_target_" in cfg.task and "_target_" in cfg.head
    if experiment != "toy":
        assert cfg.trainer.accelerator == "gpu"
        assert cfg.pair.dtype == "bfloat16"


# ----------------------------------------------------------------------------- end to end


def compose_train(tmp: Path, pair_dir: Path, *overrides: str):
    small = [
        "+experiment=toy",
        "logger=csv",
        "trainer.max_steps=3",
        "trainer.val_check_interval=3",
        "trainer.enable_progress_bar=false",
        "data.batch_size=4",
        "data.n_val=8",
        "data.val_batch_size=8",
        "data.n_train=32",
        "model.max_new_tokens=8",
    ]
    return compose_run("train", tmp, pair_dir, small, overrides)


def test_train_checkpoints_resumes_and_exports(tmp_path, toy_tiny_dir):
    cfg = compose_train(tmp_path / "run", toy_tiny_dir)
    result = train(cfg)
    for key in ("val/score", "val/acceptance_rate", "val/tokens_per_target_call", "val/mean_w", "train/loss"):
        assert key in result["metrics"], key
    assert 0.0 <= result["metrics"]["val/mean_w"] <= 1.0
    # the checkpoint holds the head (and baseline) only: kilobytes, loadable without pickle
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    assert last.is_file() and last.stat().st_size < 200_000
    ckpt = torch.load(last, map_location="cpu", weights_only=True)
    assert all(k.startswith(("head.", "baseline_")) for k in ckpt["state_dict"])
    assert ckpt["global_step"] == 3 and ckpt["optimizer_states"]
    # the exported head loads for this pair and refuses another
    head = WeightHead.from_pretrained(result["head_dir"])
    cfg_json = (Path(result["head_dir"]) / "head_config.json").read_text()
    assert "tiny-toy" in cfg_json and '"task": "toy"' in cfg_json
    # ... and the models it was trained on, which evaluation checks a head against
    from diversed.models.heads import pair_record
    from diversed.models.pair import describe_pair

    assert json.loads(cfg_json)["pair_identity"] == pair_record(describe_pair(cfg.pair).identity)
    with pytest.raises(ValueError, match="draft_hidden_size"):
        WeightHead.from_pretrained(result["head_dir"], draft_hidden_size=head.draft_hidden_size + 1)
    # resume: continues from step 3 to step 5
    cfg2 = compose_train(tmp_path / "run", toy_tiny_dir, "trainer.max_steps=5", f"ckpt_path={last}")
    train(cfg2)
    assert torch.load(last, map_location="cpu", weights_only=True)["global_step"] == 5


def test_released_recipe_warmup_cosine_and_constant_baseline(tmp_path, toy_tiny_dir):
    """The paper preset's recipe: linear warm-up then cosine decay to 0 over the run, and a
    constant baseline b (the running-mean buffer never moves)."""
    cfg = compose_train(
        tmp_path / "run",
        toy_tiny_dir,
        "trainer.max_steps=4",
        "model.lr_schedule=cosine",
        "model.warmup_steps=2",
        "model.baseline=constant",
        "model.baseline_constant=1.0",
        "model.optimizer.lr=0.01",
    )
    train(cfg)
    ckpt = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    (sched,) = ckpt["lr_schedulers"]
    assert sched["last_epoch"] == 4 and sched["base_lrs"] == [0.01]
    assert ckpt["optimizer_states"][0]["param_groups"][0]["lr"] == pytest.approx(
        0.0, abs=1e-12
    )  # cosine's end
    assert ckpt["state_dict"]["baseline_steps"] == 0
    # the same schedule, step by step: 0, 0.5, 1 (warm-up) then cos down to 0
    from transformers import get_scheduler

    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    s = get_scheduler("cosine", opt, num_warmup_steps=2, num_training_steps=4)
    lrs = []
    for _ in range(4):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step(), s.step()
    assert lrs == pytest.approx([0.0, 0.5, 1.0, 0.5])


@pytest.mark.slow
def test_multirun_over_reg_scale(tmp_path, toy_tiny_dir):
    import subprocess
    import sys

    cmd = [
        sys.executable,
        "-m",
        "diversed.train",
        "-m",
        "+experiment=toy",
        "logger=csv",
        "model.reg_scale=0.0,1.0",
        "trainer.max_steps=2",
        "trainer.val_check_interval=2",
        "data.n_val=4",
        "data.n_train=16",
        "data.batch_size=4",
        "model.max_new_tokens=6",
        f"hydra.sweep.dir={tmp_path}",
        *pair_overrides(toy_tiny_dir),
    ]
    subprocess.run(cmd, check=True, timeout=900)
    assert len(list(tmp_path.glob("*/head/head.safetensors"))) == 2


def test_last_checkpoint_is_the_latest_state_and_resume_continues_there(tmp_path, toy_tiny_dir, monkeypatch):
    """Validation every 2 steps of 5: last.ckpt holds step 5 (not the last validation's), and a
    resumed run trains only the steps after it."""
    cfg = compose_train(tmp_path / "run", toy_tiny_dir, "trainer.max_steps=5", "trainer.val_check_interval=2")
    train(cfg)
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    assert torch.load(last, map_location="cpu", weights_only=True)["global_step"] == 5
    steps = []
    real = DiversedModule.training_step

    def counting(self, batch, batch_idx):
        steps.append(self.global_step)
        return real(self, batch, batch_idx)

    monkeypatch.setattr(DiversedModule, "training_step", counting)
    train(
        compose_train(
            tmp_path / "run",
            toy_tiny_dir,
            "trainer.max_steps=7",
            "trainer.val_check_interval=2",
            f"ckpt_path={last}",
        )
    )
    assert steps == [5, 6]  # steps 6 and 7 (0-based global steps 5, 6), nothing retrained
    assert torch.load(last, map_location="cpu", weights_only=True)["global_step"] == 7


def test_each_multirun_job_gets_its_own_logger_run(tmp_path, monkeypatch):
    """wandb reuses a process's open run unless it is finished: jobs of one multirun (the basic
    launcher runs them in one process) are named apart and each run is finished at its end."""
    from omegaconf import OmegaConf

    from diversed.config import runtime

    cfg = OmegaConf.create(
        {
            "logger": {
                "wandb": {
                    "_target_": "lightning.pytorch.loggers.WandbLogger",
                    "name": "toy",
                    "save_dir": str(tmp_path),
                    "offline": True,
                    "project": "t",
                },
                "csv": {"_target_": "lightning.pytorch.loggers.CSVLogger", "save_dir": str(tmp_path)},
            }
        }
    )
    monkeypatch.setattr(runtime, "sweep_job", lambda: (3, "multirun/evaluate/toy"))
    loggers = runtime.make_loggers(cfg, job_type="evaluate")
    wandb_logger = next(lg for lg in loggers if type(lg).__name__ == "WandbLogger")
    init = wandb_logger._wandb_init
    # one group per sweep, the entry point as the job type, and no `anonymous` (wandb warns it does nothing)
    assert (init["name"], init["group"], init["job_type"]) == ("toy-3", "multirun/evaluate/toy", "evaluate")
    assert "anonymous" not in init
    monkeypatch.setattr(runtime, "sweep_job", lambda: None)
    init = next(lg for lg in runtime.make_loggers(cfg) if type(lg).__name__ == "WandbLogger")._wandb_init
    assert init["name"] == "toy" and "group" not in init
    finished = []
    import wandb

    monkeypatch.setattr(wandb, "run", object())
    monkeypatch.setattr(wandb, "finish", lambda: finished.append(True))
    runtime.finish(loggers)
    assert finished == [True]


@pytest.mark.parametrize("hidden_sizes", [[], [16]])
def test_checking_a_checkpoint_against_the_pair_draws_nothing_from_the_generator(hidden_sizes):
    """The shapes a checkpoint must have come from a head built on the meta device with the generator's
    state kept: the run's own head, drawn after the check, is the one drawn without it."""
    import functools

    from diversed.training.head_module import head_shapes

    card = SimpleNamespace(hidden={"draft": 64, "target": 128})
    torch.manual_seed(0)
    before = torch.random.get_rng_state()
    shapes = head_shapes(functools.partial(WeightHead, hidden_sizes=hidden_sizes), card)
    assert torch.equal(torch.random.get_rng_state(), before)
    assert shapes["head.net.0.weight"] == ((hidden_sizes or [2])[0], 64 + 128)


# ----------------------------------------------------------------------------- resumed = uninterrupted


RESUMABLE = [
    "trainer.max_steps=9",
    "trainer.val_check_interval=3",
    "callbacks.last_checkpoint.every_n_train_steps=2",
    "data.n_train=16",
    "model.optimizer.lr=0.05",  # 4 batches an epoch: resumes mid-epoch and at its end
    # the toy's objective is flat at this size; the falling mean w makes "best" move with each validation
    "callbacks.model_checkpoint.monitor=val/mean_w",
    "callbacks.model_checkpoint.mode=min",
]


@pytest.fixture(scope="module")
def uninterrupted_train(tmp_path_factory, toy_tiny_dir):
    run = tmp_path_factory.mktemp("uninterrupted") / "run"
    return run, train(compose_train(run, toy_tiny_dir, *RESUMABLE))


@pytest.mark.parametrize(
    ("hook", "step", "resume_from"),
    [
        (
            "on_train_batch_start",
            3,
            "last.ckpt",
        ),  # last.ckpt of step 2, mid-epoch, before step 3's validation
        ("on_train_batch_start", 5, "last.ckpt"),  # last.ckpt of step 4: the end of the first epoch
        (
            "on_train_batch_start",
            7,
            "step_000006.ckpt",
        ),  # the best checkpoint, saved at the end of a validation
        ("on_validation_start", 6, "last.ckpt"),  # killed in step 6's validation: last.ckpt is step 4's
        (None, 5, "last.ckpt"),  # a run of 5 steps (mid-epoch) continued to 9
    ],
)
def test_a_resumed_training_is_the_run_it_continues(
    hook, step, resume_from, tmp_path, toy_tiny_dir, monkeypatch, uninterrupted_train
):
    """Killed (or stopped by max_steps), then resumed in place: the final head, optimizer and
    baseline are bit for bit the uninterrupted run's, so is the exported best head, its step, and
    every logged metric."""
    ref, ref_result = uninterrupted_train
    run = tmp_path / "run"
    if hook is None:
        train(compose_train(run, toy_tiny_dir, *RESUMABLE, f"trainer.max_steps={step}"))
    else:
        with monkeypatch.context() as m:
            kill_at(m, DiversedModule, hook, step)
            with pytest.raises(Killed):
                train(compose_train(run, toy_tiny_dir, *RESUMABLE))
    saved = step if hook is None else (step - 1) // 2 * 2
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == saved
    result = train(
        compose_train(run, toy_tiny_dir, *RESUMABLE, f"ckpt_path={run / 'checkpoints' / resume_from}")
    )
    assert_resumed_is_uninterrupted(ref, run, result, ref_result, "head/head.safetensors")


def test_only_the_best_step_checkpoint_is_kept(uninterrupted_train):
    """Lightning's bookkeeping through the atomic writes: the best moved at each validation (steps 3,
    6, 9) and each earlier best was removed; nothing temporary is left."""
    run, result = uninterrupted_train
    assert Path(result["best_checkpoint"]).name == "step_000009.ckpt"
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["last.ckpt", "step_000009.ckpt"]
    assert sorted(p.name for p in run.iterdir() if p.name.startswith(".")) == []


def test_a_full_disk_stops_training_with_the_directory_named_and_leaves_no_part(
    tmp_path, toy_tiny_dir, monkeypatch
):
    import errno
    import os
    import re

    from diversed.files import atomic

    real = atomic.write_all

    def half_then_full(fd, data):
        os.write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")

    def fill_the_disk(self, batch, batch_idx):  # after step 3 (and its validation): every later write fails
        if self.global_step == 3:
            monkeypatch.setattr(atomic, "write_all", half_then_full)

    monkeypatch.setattr(DiversedModule, "on_train_batch_start", fill_the_disk, raising=False)
    run = tmp_path / "run"
    where = re.escape(str(run / "checkpoints"))
    with pytest.raises(
        atomic.DiskFull, match=rf"the disk holding {where} is full \(no space left writing last\.ckpt\)"
    ):
        train(compose_train(run, toy_tiny_dir, *RESUMABLE))
    monkeypatch.setattr(atomic, "write_all", real)
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["last.ckpt", "step_000003.ckpt"]
    for name, step in (("last.ckpt", 2), ("step_000003.ckpt", 3)):  # the previous checkpoints, whole
        assert torch.load(run / "checkpoints" / name, weights_only=True)["global_step"] == step
    assert not (run / "head").exists()
