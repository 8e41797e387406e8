"""`diversed.likelihood`: a head against the static ensemble that rejects as much, on references."""

from __future__ import annotations

import json

import pytest
import torch
from tiny_models import compose_run

from diversed import WeightHead
from diversed.errors import ConfigError
from diversed.likelihood import compare, likelihood
from diversed.training.reinforce import equal_acceptance_weight, log_v

# ----------------------------------------------------------------------------- the maths


def test_the_equal_acceptance_weight_rejects_as_much_as_the_head():
    g = torch.Generator().manual_seed(0)
    w, tv = torch.rand(200, generator=g), torch.rand(200, generator=g)
    mask = torch.rand(200, generator=g) > 0.3
    w_star = equal_acceptance_weight(w, tv, mask)
    # mean_t w*·TV_t = mean_t w_t·TV_t over the masked tokens: the same acceptance 1 − w·TV on average
    assert float((w_star * tv)[mask].mean()) == pytest.approx(float((w * tv)[mask].mean()), rel=1e-6)
    assert equal_acceptance_weight(w, torch.zeros(200), mask) == 1.0  # laws that never differ
    p, q = torch.tensor([0.5, 0.0]), torch.tensor([0.25, 0.0])
    assert torch.allclose(log_v(0.2, p, q), torch.log(torch.tensor([0.3, 1e-30])))


class FakeHead(torch.nn.Module):
    """w from the first hidden feature of the draft's state (the rows carry it), within its bounds."""

    w_bounds = (0.0, 1.0)

    def forward(self, h_d, h_t, *, features=None):
        return h_d[..., 0].float()


def rows_where_the_target_knows(n_rows=40, seed=0):
    """References whose tokens the target predicts well on half the positions (p high, q low) and the
    draft on the other half, with h_d[..., 1] saying which (what a head could learn from context)."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(n_rows):
        t = 12
        target_knows = torch.rand(t, generator=g) < 0.5
        p = torch.where(target_knows, 0.8, 0.1) + 0.05 * torch.rand(t, generator=g)
        q = torch.where(target_knows, 0.1, 0.8) + 0.05 * torch.rand(t, generator=g)
        tv = torch.where(target_knows, 0.7, 0.3) + 0.1 * torch.rand(
            t, generator=g
        )  # the laws differ more there
        h_d = torch.stack([torch.zeros(t), target_knows.float()], -1)
        rows.append({"h_d": h_d, "h_t": torch.zeros(t, 1), "p_y": p, "q_y": q, "tv": tv})
    return rows


def with_w(rows, w_of):
    """The rows with the fake head's w (h_d[..., 0]) set from the context bit h_d[..., 1]."""
    out = []
    for r in rows:
        h_d = r["h_d"].clone()
        h_d[:, 0] = w_of(r["h_d"][:, 1])
        out.append(r | {"h_d": h_d})
    return out


def test_a_head_that_follows_the_context_beats_every_constant_at_its_acceptance():
    rows = rows_where_the_target_knows()
    # w high where the target predicts the reference, low where the draft does
    weighted = with_w(rows, lambda bit: 0.1 + 0.8 * bit)
    knows = compare(FakeHead(), weighted, "cpu")
    w, tv = (torch.cat([r[k] for r in weighted]) for k in ("h_d", "tv"))
    assert knows["w_equal_acceptance"] == pytest.approx(float((w[:, 0] * tv).sum() / tv.sum()), rel=1e-6)
    assert knows["mean_w"] != pytest.approx(knows["w_equal_acceptance"], abs=0.01)  # not the same constant
    d, lo, hi = knows["delta_equal_acceptance"]
    assert d < 0 and hi < 0, knows["delta_equal_acceptance"]
    assert knows["acceptance"] == pytest.approx(
        1 - knows["w_equal_acceptance"] * torch.cat([r["tv"] for r in rows]).mean().item(), rel=1e-5
    )
    # the same weights the wrong way round: worse than the constant
    backwards = compare(FakeHead(), with_w(rows, lambda bit: 0.9 - 0.8 * bit), "cpu")
    d, lo, hi = backwards["delta_equal_acceptance"]
    assert d > 0 and lo > 0
    # a constant head is its own w*: no difference at all
    flat = compare(FakeHead(), with_w(rows, lambda bit: 0.4 + 0 * bit), "cpu")
    assert flat["w_equal_acceptance"] == pytest.approx(0.4, abs=1e-6)
    assert flat["delta_equal_acceptance"][0] == pytest.approx(0.0, abs=1e-9)
    curve = {round(c["w"], 2): c for c in flat["static_curve"]}
    assert curve[0.4]["nll"] == pytest.approx(flat["nll_head"], rel=1e-6)
    assert [c["w"] for c in flat["static_curve"]] == sorted(c["w"] for c in flat["static_curve"])


# ----------------------------------------------------------------------------- the verb


@pytest.fixture(scope="module")
def head_dirs(toy_tiny_dir, tmp_path_factory):
    cfg = json.loads((toy_tiny_dir / "target" / "config.json").read_text())
    dcfg = json.loads((toy_tiny_dir / "draft" / "config.json").read_text())
    out = []
    for i, features in enumerate(([], ["tv"])):
        torch.manual_seed(i)
        head = WeightHead(dcfg["hidden_size"], cfg["hidden_size"], features=features, normalize=True)
        with torch.no_grad():
            head.net[-1].weight.normal_(0, 0.5)
        out.append(head.save_pretrained(tmp_path_factory.mktemp(f"head{i}"), pair="tiny-toy"))
    return out


BASE = [
    "+experiment=toy",
    "task.n_examples=6",
    "task.max_new_tokens=6",
    "sweep.batch_size=4",
    "runtime.progress=false",
]


def test_every_head_and_temperature_gets_a_record(tmp_path, toy_tiny_dir, head_dirs):
    head_dirs = head_dirs[::-1]  # the head with a TV feature first: its rows are its own, not the others'
    heads = ",".join(str(h) for h in head_dirs)
    cfg = compose_run(
        "likelihood",
        tmp_path,
        toy_tiny_dir,
        BASE,
        [f"sweep.heads=[{heads}]", "sweep.temperatures=[0.0,1.0,0.5]"],
    )
    out = likelihood(cfg)
    records = json.loads(out.read_text())
    assert [(r["temperature"], r["head"]) for r in records] == [
        (t, str(h)) for t in (1.0, 0.5) for h in head_dirs
    ]  # greedy skipped: no law to score
    for r in records:
        assert r["task"] == "toy" and r["split"] == "test" and r["n_examples"] == 6 and r["files"]["head"]
        assert r["n_tokens"] > 0 and 0 <= r["mean_w"] <= 1 and 0 <= r["acceptance"] <= 1
        d, lo, hi = r["delta_equal_acceptance"]
        assert lo <= d <= hi
        assert r["nll_head"] - r["nll_static_equal_acceptance"] == pytest.approx(d, abs=1e-9)
    # the plain head and the head with a TV feature see the same references: the same token count
    assert len({r["n_tokens"] for r in records if r["temperature"] == 1.0}) == 1
    # the plain head alone: the same numbers as beside the feature head
    cfg = compose_run(
        "likelihood",
        tmp_path / "alone",
        toy_tiny_dir,
        BASE,
        [f"sweep.heads=[{head_dirs[1]}]", "sweep.temperatures=[1.0]"],
    )
    (alone,) = json.loads(likelihood(cfg).read_text())
    assert "skip_examples" not in alone and all("skip_examples" not in r for r in records)
    (beside,) = [r for r in records if r["temperature"] == 1.0 and r["head"] == str(head_dirs[1])]
    assert (
        alone["nll_head"] == pytest.approx(beside["nll_head"], rel=1e-6)
        and alone["n_tokens"] == beside["n_tokens"]
    )
    # fresh rows (task.skip_examples) are said in the record, and are other rows
    cfg = compose_run(
        "likelihood",
        tmp_path / "fresh",
        toy_tiny_dir,
        BASE,
        [f"sweep.heads=[{head_dirs[1]}]", "sweep.temperatures=[1.0]", "task.skip_examples=6"],
    )
    (fresh,) = json.loads(likelihood(cfg).read_text())
    assert fresh["skip_examples"] == 6 and fresh["nll_head"] != pytest.approx(alone["nll_head"], rel=1e-6)


def test_each_temperature_is_kept_as_it_ends(tmp_path, toy_tiny_dir, head_dirs, monkeypatch):
    import diversed.likelihood as lk

    real, calls = lk.compare, []

    def compare_then_fail(*a, **k):
        calls.append(1)
        if len(calls) > len(head_dirs):  # the second temperature's first head
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(lk, "compare", compare_then_fail)
    heads = ",".join(str(h) for h in head_dirs)
    cfg = compose_run(
        "likelihood", tmp_path, toy_tiny_dir, BASE, [f"sweep.heads=[{heads}]", "sweep.temperatures=[1.0,0.5]"]
    )
    with pytest.raises(KeyboardInterrupt):
        likelihood(cfg)
    kept = json.loads((tmp_path / "likelihood.json").read_text())
    assert [(r["temperature"], r["head"]) for r in kept] == [(1.0, str(h)) for h in head_dirs]


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["sweep.heads=[]", "sweep.temperatures=[1.0]"], "sweep.heads is empty"),
        (["sweep.heads=[HEAD]", "sweep.temperatures=[0.0]"], "greedy has no law"),
        (["sweep.heads=[/nonexistent/head]", "sweep.temperatures=[1.0]"], "/nonexistent/head"),
        (["sweep.heads=[HEAD]", "sweep.temperatures=[1.0]", "engine.top_k=50"], "full softmax"),
    ],
)
def test_bad_input_is_refused_before_any_weights_load(
    tmp_path, toy_tiny_dir, head_dirs, monkeypatch, overrides, message
):
    import diversed.likelihood as lk

    overrides = [o.replace("HEAD", str(head_dirs[0])) for o in overrides]
    cfg = compose_run("likelihood", tmp_path, toy_tiny_dir, BASE, overrides)
    monkeypatch.setattr(lk, "load_heads", lambda *a: pytest.fail("weights loaded"))
    real = lk.instantiate

    def no_pair(c, **kwargs):  # the task may be built; the pair's weights may not be read
        assert "models.pair" not in str(c.get("_target_")), "the pair was loaded"
        return real(c, **kwargs)

    monkeypatch.setattr(lk, "instantiate", no_pair)
    with pytest.raises((ConfigError, ValueError), match=message):
        likelihood(cfg)
    assert not (tmp_path / "likelihood.json").exists()


def test_a_task_without_references_is_refused_before_any_weights_load(
    tmp_path, toy_tiny_dir, head_dirs, monkeypatch
):
    import diversed.likelihood as lk
    from diversed.tasks.toy import ToyTask

    monkeypatch.setattr(ToyTask, "target", lambda self, e: "")
    monkeypatch.setattr(lk, "load_heads", lambda *a: pytest.fail("weights loaded"))
    cfg = compose_run(
        "likelihood",
        tmp_path,
        toy_tiny_dir,
        BASE,
        [f"sweep.heads=[{head_dirs[0]}]", "sweep.temperatures=[1.0]"],
    )
    with pytest.raises(ConfigError, match="has a reference to score"):
        likelihood(cfg)


def test_mbpp_is_scored_without_the_code_execution_opt_in(tmp_path, toy_tiny_dir, monkeypatch):
    """The verb scores references and runs no completion: MBPP, which a sweep builds only with the
    opt-in, is built without it, and the run goes on to its next check (here a missing head's)."""
    from test_tasks import MBPP_FULL_ROWS

    import diversed.likelihood as lk
    from diversed.tasks.execution import ALLOW_ENV

    monkeypatch.delenv(ALLOW_ENV, raising=False)
    rows = tmp_path / "mbpp.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in MBPP_FULL_ROWS))
    monkeypatch.setattr(lk, "load_heads", lambda *a: pytest.fail("weights loaded"))
    overrides = [
        "task=mbpp",
        f"task.data_files={rows}",
        "sweep.heads=[/nonexistent/head]",
        "sweep.temperatures=[1.0]",
    ]
    cfg = compose_run("likelihood", tmp_path / "run", toy_tiny_dir, BASE, overrides)
    assert cfg.task.name == "mbpp" and not cfg.task.allow_code_execution
    with pytest.raises((ConfigError, ValueError), match="/nonexistent/head"):
        likelihood(cfg)
