"""The head against saturation: normalised inputs, bounded w, old configs unchanged; the
teacher-forced stage's loss and run; rewards from a task's other metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tiny_models import compose_run

from diversed import WeightHead
from diversed.models.heads import CONFIG_NAME
from diversed.train import train
from diversed.training.reinforce import teacher_forced_loss

D, T = 8, 12  # the draft's and the target's hidden sizes


def hidden(seed: int = 0, n: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, D, generator=g) * 3 + 1, torch.randn(n, T, generator=g) * 5 - 2


def trained_looking(head: WeightHead, scale: float = 0.3) -> WeightHead:
    """`head` with nonzero weights in every layer (the last starts at zero)."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in head.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * scale)
    return head


# ----------------------------------------------------------------------------- the head


@pytest.mark.parametrize("hidden_sizes", [[], [16]])
def test_a_normalized_head_does_not_see_its_inputs_scale_and_a_raw_one_does(hidden_sizes):
    h_d, h_t = hidden()
    norm = trained_looking(WeightHead(D, T, hidden_sizes, normalize=True))
    raw = trained_looking(WeightHead(D, T, hidden_sizes, normalize=False), scale=0.02)
    with torch.no_grad():
        w = norm(h_d, h_t)
        assert (w - 0.5).abs().max() > 0.01  # not the untrained head's 0.5
        assert torch.allclose(norm(h_d * 1000, h_t * 1000), w, atol=1e-5)
        w, w_big = raw(h_d, h_t), raw(h_d * 1000, h_t * 1000)
    assert (w - w_big).abs().max() > 0.1
    assert not list(norm.state_dict()).count("norm")  # LayerNorm without affine: no parameters
    assert list(norm.state_dict()) == list(raw.state_dict())


@pytest.mark.parametrize("bounds", [(0.02, 0.98), (0.1, 0.6), (0.0, 1.0)])
def test_w_stays_within_its_bounds_and_starts_at_their_midpoint(bounds):
    lo, hi = bounds
    # the head's initial layers and the wide last layer below are drawn from the global generator:
    # seeded, so that whether 6 rows saturate both ways does not hang on the tests that ran before
    torch.manual_seed(0)
    head = WeightHead(D, T, w_bounds=bounds)
    h_d, h_t = hidden()
    assert torch.allclose(head(h_d, h_t), torch.full((6,), (lo + hi) / 2))
    with torch.no_grad():
        head.net[-1].bias.copy_(torch.tensor([1e4, -1e4]))  # the target logit saturates
    exactly = dict(rtol=0.0, atol=1e-7)  # float32's rounding of lo + (hi − lo)·1
    assert torch.allclose(head(h_d, h_t), torch.full((6,), hi), **exactly)
    with torch.no_grad():
        head.net[-1].bias.copy_(torch.tensor([-1e4, 1e4]))
    assert torch.allclose(head(h_d, h_t), torch.full((6,), lo), **exactly)
    with torch.no_grad():
        head.net[-1].bias.zero_()
        head.net[-1].weight.normal_(0, 50.0)
    w = head(h_d, h_t)
    assert torch.all((w >= lo - 1e-7) & (w <= hi + 1e-7))
    assert ((w - lo).abs() < 1e-3).any() and ((w - hi).abs() < 1e-3).any()  # saturated both ways


@pytest.mark.parametrize("bounds", [(0.5, 0.5), (0.6, 0.4), (-0.1, 0.9), (0.1, 1.1)])
def test_bounds_outside_0_1_or_not_increasing_are_refused(bounds):
    with pytest.raises(ValueError, match="w_bounds"):
        WeightHead(D, T, w_bounds=bounds)


def test_a_head_saved_before_normalize_and_bounds_loads_as_it_was(tmp_path):
    """An old head_config.json (no normalize, no w_bounds) loads as the paper's head and gives
    the w it gave: softmax of the raw hidden states' logits, in [0, 1]."""
    head = trained_looking(WeightHead(D, T, hidden_sizes=[16]), scale=0.5)
    h_d, h_t = hidden()
    with torch.no_grad():
        # what the head computed before the options existed
        before = torch.softmax(head.net(torch.cat([h_d, h_t], -1)), -1)[..., 0]
    head.save_pretrained(tmp_path, task="toy")
    config = json.loads((tmp_path / CONFIG_NAME).read_text())
    del config["normalize"], config["w_bounds"]
    (tmp_path / CONFIG_NAME).write_text(json.dumps(config))
    old = WeightHead.from_pretrained(tmp_path)
    assert old.normalize is False and old.w_bounds == (0.0, 1.0)
    with torch.no_grad():
        assert torch.equal(old(h_d, h_t), before)
    assert old.config()["normalize"] is False and old.config()["w_bounds"] == [0.0, 1.0]


def test_the_saved_config_round_trips_normalize_and_bounds(tmp_path):
    head = trained_looking(WeightHead(D, T, normalize=True, w_bounds=(0.05, 0.9)))
    head.save_pretrained(tmp_path)
    config = json.loads((tmp_path / CONFIG_NAME).read_text())
    assert config["normalize"] is True and config["w_bounds"] == [0.05, 0.9]
    loaded = WeightHead.from_pretrained(tmp_path)
    assert loaded.normalize is True and loaded.w_bounds == (0.05, 0.9)
    h_d, h_t = hidden()
    with torch.no_grad():
        assert torch.equal(loaded(h_d, h_t), head(h_d, h_t))


def test_cached_features_give_the_w_of_p_and_q():
    head = trained_looking(WeightHead(D, T, [16], features=["entropy_p", "entropy_q", "tv"], normalize=True))
    h_d, h_t = hidden()
    p, q = torch.softmax(torch.randn(6, 20), -1), torch.softmax(torch.randn(6, 20), -1)
    with torch.no_grad():
        assert torch.equal(head(h_d, h_t, p, q), head(h_d, h_t, features=head.feature_values(p, q)))


# ----------------------------------------------------------------------------- the teacher-forced loss


def test_teacher_forced_loss_pushes_w_toward_the_model_that_predicts_the_reference():
    """λ = 0: d loss / d w < 0 where p(y*) > q(y*) (a step raises w), > 0 where q(y*) > p(y*); the
    regulariser alone pushes w down where the models differ."""
    p_y = torch.tensor([[0.9, 0.2, 0.5]])
    q_y = torch.tensor([[0.1, 0.7, 0.5]])
    tv = torch.tensor([[0.4, 0.3, 0.0]])
    mask = torch.ones(1, 3, dtype=torch.bool)
    w = torch.full((1, 3), 0.5, requires_grad=True)
    (grad,) = torch.autograd.grad(teacher_forced_loss(w, p_y, q_y, tv, mask, 0.0)[0], w)
    assert grad[0, 0] < 0 and grad[0, 1] > 0 and grad[0, 2] == 0
    # d/dw −log(w·p + (1 − w)·q) = −(p − q)/v, over 3 tokens
    assert torch.allclose(grad, -(p_y - q_y) / (0.5 * p_y + 0.5 * q_y) / 3)
    same = p_y.clone()
    (grad,) = torch.autograd.grad(teacher_forced_loss(w, same, same, tv, mask, 1.0)[0], w)
    assert grad[0, 0] > 0 and grad[0, 1] > 0 and grad[0, 2] == 0
    # padding carries no gradient
    mask[0, 1] = False
    (grad,) = torch.autograd.grad(teacher_forced_loss(w, p_y, q_y, tv, mask, 0.1)[0], w)
    assert grad[0, 1] == 0 and grad[0, 0] != 0


# ----------------------------------------------------------------------------- end to end


def compose_small(tmp: Path, pair_dir: Path, *overrides: str):
    small = [
        "+experiment=toy",
        "logger=csv",
        "trainer.max_steps=2",
        "trainer.val_check_interval=2",
        "trainer.enable_progress_bar=false",
        "data.batch_size=4",
        "data.n_val=4",
        "data.val_batch_size=4",
        "data.n_train=8",
        "model.max_new_tokens=6",
    ]
    return compose_run("train", tmp, pair_dir, small, overrides)


def test_a_teacher_forced_stage_then_reinforce_on_the_mean_metric(tmp_path, toy_tiny_dir, caplog):
    """The stage's steps are taken (logged and recorded in the checkpoint), REINFORCE follows, the
    exported head is normalised and bounded; resumed, the stage is not taken again."""
    caplog.set_level("INFO", logger="diversed.training.head_module")
    run = tmp_path / "run"
    result = train(
        compose_small(
            run,
            toy_tiny_dir,
            "model.teacher_forced_steps=3",
            "model.teacher_forced_lr=0.01",
            "model.reward=mean",
        )
    )
    assert "teacher-forced step 3/3" in caplog.text
    logged = (next(run.rglob("metrics.csv"))).read_text()
    assert "teacher_forced/loss" in logged and "teacher_forced/mean_w" in logged
    config = json.loads((Path(result["head_dir"]) / CONFIG_NAME).read_text())
    assert config["normalize"] is True and config["w_bounds"] == [0.02, 0.98]
    last = run / "checkpoints" / "last.ckpt"
    ckpt = torch.load(last, map_location="cpu", weights_only=True)
    assert ckpt["teacher_forced_steps_done"] == 3 and ckpt["global_step"] == 2
    assert "train/loss" in result["metrics"]
    caplog.clear()
    train(
        compose_small(
            run,
            toy_tiny_dir,
            "model.teacher_forced_steps=3",
            "model.reward=mean",
            "trainer.max_steps=3",
            f"ckpt_path={last}",
        )
    )
    assert "teacher-forced" not in caplog.text
    assert torch.load(last, map_location="cpu", weights_only=True)["teacher_forced_steps_done"] == 3
    # a head set up otherwise than the checkpoint's is refused: its weights would mean another w
    with pytest.raises(ValueError, match=r"head.normalize=true head.w_bounds=\[0.02, 0.98\], this run's"):
        train(
            compose_small(
                run, toy_tiny_dir, "head.normalize=false", "trainer.max_steps=4", f"ckpt_path={last}"
            )
        )


def test_the_teacher_forced_objective_trains_without_rollouts_and_resumes_exactly(
    tmp_path, toy_tiny_dir, monkeypatch
):
    """model.objective=teacher_forced: the run's steps minimise the reference's loss on cached rows
    (no rollout in a training step, no reward logged); a large λ drives w down step by step; a run
    stopped at step 2 and resumed ends with the uninterrupted run's head, bit for bit."""
    from safetensors.torch import load_file

    from diversed.training.head_module import DiversedModule

    rollouts: list[bool] = []
    real = DiversedModule.rollout
    monkeypatch.setattr(
        DiversedModule,
        "rollout",
        lambda self, *a, **k: rollouts.append(self.trainer.training) or real(self, *a, **k),
    )
    tf = [
        "model.objective=teacher_forced",
        "model.optimizer.lr=0.05",
        "model.reg_scale=50",
        "trainer.log_every_n_steps=1",
    ]
    whole = tmp_path / "whole"
    result = train(compose_small(whole, toy_tiny_dir, *tf, "trainer.max_steps=4"))
    assert rollouts and not any(rollouts)  # validation decodes; no training step rolls out
    rows = [r.split(",") for r in next(whole.rglob("metrics.csv")).read_text().splitlines()]
    col = {name: i for i, name in enumerate(rows[0])}
    assert "train/reward" not in col and "train/nll" in col
    mean_w = [float(r[col["train/mean_w"]]) for r in rows[1:] if r[col["train/mean_w"]]]
    assert len(mean_w) == 4 and mean_w[-1] < mean_w[0] < 0.51  # λ·w·TV pulls w down from 0.5

    parted = tmp_path / "parted"
    train(compose_small(parted, toy_tiny_dir, *tf, "trainer.max_steps=2"))
    resumed = train(
        compose_small(
            parted,
            toy_tiny_dir,
            *tf,
            "trainer.max_steps=4",
            f"ckpt_path={parted / 'checkpoints' / 'last.ckpt'}",
        )
    )
    a = load_file(Path(result["head_dir"]) / "head.safetensors")
    b = load_file(Path(resumed["head_dir"]) / "head.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_the_teacher_forced_objective_refuses_an_adaptive_lambda_before_anything_loads(
    tmp_path, toy_tiny_dir
):
    from diversed.errors import ConfigError

    with pytest.raises(ConfigError, match="model.reg_mode=adaptive.*model.reg_mode=fixed"):
        train(
            compose_small(
                tmp_path / "run", toy_tiny_dir, "model.objective=teacher_forced", "model.reg_mode=adaptive"
            )
        )


def test_a_reward_the_task_does_not_compute_names_the_metrics_it_has(tmp_path, toy_tiny_dir):
    with pytest.raises(ValueError, match=r"model.reward='nonsense'.*\['exact_match'\]"):
        train(compose_small(tmp_path / "run", toy_tiny_dir, "model.reward=nonsense"))


def test_an_empty_reward_and_bad_bounds_are_refused_before_anything_loads(tmp_path, toy_tiny_dir):
    from diversed.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        train(
            compose_small(
                tmp_path / "run",
                toy_tiny_dir,
                "model.reward=''",
                "head.w_bounds=[0.9,0.1]",
                "model.teacher_forced_steps=-1",
            )
        )
    for key in ("model.reward", "head.w_bounds", "model.teacher_forced_steps"):
        assert key in str(e.value)


@pytest.mark.parametrize(
    "loss, overrides, when",
    [
        ("regularised_loss", [], "training step 1"),
        ("teacher_forced_loss", ["model.teacher_forced_steps=2"], "teacher-forced step 1"),
    ],
)
def test_a_head_that_diverges_stops_the_run_before_a_checkpoint_or_the_export_holds_it(
    tmp_path, toy_tiny_dir, monkeypatch, loss, overrides, when
):
    """A NaN loss makes the optimizer write NaN into the head: the run stops at that step, naming it
    and the head's tensors, and nothing it wrote holds the NaN head."""
    import diversed.training.head_module as head_module
    from diversed.models.heads import NonFiniteHead

    real = getattr(head_module, loss)

    def diverging(*args, **kwargs):
        first, *rest = real(*args, **kwargs)
        return (first * float("nan"), *rest)

    monkeypatch.setattr(head_module, loss, diverging)
    run = tmp_path / "run"
    with pytest.raises(
        NonFiniteHead,
        match=rf"the head after {when} holds non-finite weights \(net\.\d+\.weight: \d+ NaN of its \d+ values"
        r".*Lower the learning rate \(optimizer\.lr\)",
    ):
        train(compose_small(run, toy_tiny_dir, *overrides, "trainer.val_check_interval=1"))
    assert not (run / "head").exists()
    for ckpt in run.rglob("*.ckpt"):  # (none is written before a step's end)
        state = torch.load(ckpt, map_location="cpu", weights_only=True)["state_dict"]
        assert all(torch.isfinite(v).all() for k, v in state.items() if k.startswith("head."))


def test_a_checkpoint_of_a_non_finite_head_is_refused():
    """However the head got there (a step the module did not see end), no checkpoint holds it."""
    from diversed.models.heads import NonFiniteHead
    from diversed.training.head_module import DiversedModule

    head = WeightHead(D, T)
    module = DiversedModule(head, torch.optim.Adam)
    checkpoint: dict = {}
    module.on_save_checkpoint(checkpoint)
    assert checkpoint["teacher_forced_steps_done"] == 0
    with torch.no_grad():
        head.net[0].bias[1] = float("nan")
    with pytest.raises(NonFiniteHead, match=r"after training step 0 .*\(net\.0\.bias: 1 NaN of its 2"):
        module.on_save_checkpoint({})
