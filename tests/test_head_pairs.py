"""A trained head belongs to the models it was trained on: evaluation refuses it on another pair
(also one with the same hidden sizes) before any weights load, unless asked to allow it."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file
from tiny_models import compose_run

import diversed.evaluate as ev
from diversed import WeightHead
from diversed.models.heads import pair_record, same_pair
from diversed.models.pair import describe_pair
from diversed.sweep.results import load_results

SMALL = [
    "+experiment=toy",
    "task.n_examples=4",
    "task.max_new_tokens=4",
    "sweep.batch_size=4",
    "sweep.draft_lengths=[2]",
    "sweep.temperatures=[0.0]",
    "sweep.methods=[dynamic]",
    "timing.warmup=0",
    "timing.repeats=0",
    "runtime.progress=false",
    "sweep.num_seeds=1",
]


@pytest.fixture(scope="module")
def other_pair_dir(toy_tiny_dir, tmp_path_factory):
    """The tiny toy pair with other target weights: the same hidden sizes, other models."""
    out = tmp_path_factory.mktemp("other") / "pair"
    shutil.copytree(toy_tiny_dir, out)
    for file in (out / "target").glob("*.safetensors"):
        state = load_file(file)
        save_file({k: v + 0.01 for k, v in state.items()}, file, metadata={"format": "pt"})
    return out


def card_of(tmp_path, pair_dir):
    return describe_pair(compose_run("evaluate", tmp_path, pair_dir, SMALL).pair)


def save_head(directory, card, **metadata):
    WeightHead(card.hidden["draft"], card.hidden["target"]).save_pretrained(
        directory, pair="tiny-toy", **metadata
    )
    return directory


@pytest.fixture
def no_weights(monkeypatch):
    from transformers import PreTrainedModel

    def refuse(*args, **kwargs):
        raise AssertionError("model weights were read before the heads were checked")

    monkeypatch.setattr(PreTrainedModel, "from_pretrained", classmethod(refuse))


def test_a_head_of_other_models_with_the_same_sizes_is_refused(
    tmp_path, toy_tiny_dir, other_pair_dir, no_weights
):
    card = card_of(tmp_path, toy_tiny_dir)
    head = save_head(tmp_path / "run1" / "head", card, pair_identity=pair_record(card.identity))
    cfg = compose_run("evaluate", tmp_path / "out", other_pair_dir, SMALL, [f"sweep.heads=[{head}]"])
    with pytest.raises(ValueError) as err:
        ev.evaluate(cfg)
    text = str(err.value)
    assert f"head {head} was trained on the pair tiny-toy (target {toy_tiny_dir.resolve()}/target" in text
    assert f"not on the pair being evaluated, tiny-toy (target {other_pair_dir.resolve()}/target" in text
    assert "Train a head for this pair" in text and "sweep.allow_other_pair_heads=true" in text


def test_the_same_models_elsewhere_and_older_heads_pass(tmp_path, toy_tiny_dir, caplog):
    card = card_of(tmp_path, toy_tiny_dir)
    copy = tmp_path / "copy"
    shutil.copytree(toy_tiny_dir, copy)  # another directory, the same weights: the same models
    head = save_head(tmp_path / "run1" / "head", card, pair_identity=pair_record(card.identity))
    old = save_head(tmp_path / "run0" / "head", card)  # no pair_identity: saved before it was recorded
    from diversed.sweep.preflight import check_heads

    with caplog.at_level("WARNING"):
        digests = check_heads(card_of(tmp_path, copy), [str(head), str(old)])
    assert set(digests) == {str(head), str(old)} and all(isinstance(d, str) for d in digests.values())
    assert f"head {old} does not record which models it was trained on" in caplog.text
    assert f"head {head}" not in caplog.text


def test_allowed_on_request_and_the_points_say_so(tmp_path, toy_tiny_dir, other_pair_dir, caplog):
    card = card_of(tmp_path, toy_tiny_dir)
    head = save_head(tmp_path / "run1" / "head", card, pair_identity=pair_record(card.identity))
    out = tmp_path / "out"
    cfg = compose_run(
        "evaluate", out, other_pair_dir, SMALL, [f"sweep.heads=[{head}]", "sweep.allow_other_pair_heads=true"]
    )
    with caplog.at_level("INFO"):
        ev.evaluate(cfg)
    assert "head=run1/head" in caplog.text  # labelled by its run (every exported head is <run>/head)
    (record,) = load_results(out).to_dict("records")
    assert record["head_trained_on_pair"] == "tiny-toy"
    settings = json.loads((out / "settings" / f"{record['settings']}.json").read_text())
    assert settings["head"]["trained_on_pair"] == "tiny-toy"
    assert settings["head"]["trained_on_models"] == pair_record(card.identity)


def test_a_damaged_head_file_is_named(tmp_path, toy_tiny_dir, no_weights):
    card = card_of(tmp_path, toy_tiny_dir)
    head = save_head(tmp_path / "run1" / "head", card, pair_identity=pair_record(card.identity))
    weights = head / "head.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    cfg = compose_run("evaluate", tmp_path / "out", toy_tiny_dir, SMALL, [f"sweep.heads=[{head}]"])
    with pytest.raises(
        ValueError, match=rf"sweep\.heads entry {head}: {weights} cannot be read .*copy the head again"
    ):
        ev.evaluate(cfg)


def test_a_damaged_head_config_or_draft_file_is_named_before_the_pair_loads(
    tmp_path, toy_tiny_dir, no_weights
):
    card = card_of(tmp_path, toy_tiny_dir)
    head = save_head(tmp_path / "run1" / "head", card, pair_identity=pair_record(card.identity))
    config = head / "head_config.json"
    config.write_text(config.read_text()[:40])
    cfg = compose_run("evaluate", tmp_path / "out", toy_tiny_dir, SMALL, [f"sweep.heads=[{head}]"])
    with pytest.raises(
        ValueError,
        match=rf"sweep\.heads entry {head}: {config} cannot be read \(JSONDecodeError.*copy the head again",
    ):
        ev.evaluate(cfg)
    with pytest.raises(
        FileNotFoundError, match=rf"{config} cannot be read"
    ):  # loading it directly says the same
        WeightHead.from_pretrained(head)
    draft = (
        tmp_path / "run2" / "draft"
    )  # a distilled draft whose weights were cut short (a full disk, a copy)
    shutil.copytree(toy_tiny_dir / "draft", draft)
    weights = draft / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    cfg = compose_run(
        "evaluate",
        tmp_path / "out",
        toy_tiny_dir,
        SMALL,
        ["sweep.methods=[finetuned_draft]", f"sweep.draft_models=[{draft}]"],
    )
    with pytest.raises(
        ValueError, match=rf"sweep\.draft_models entry {draft}: {weights} cannot be read .*distil it again"
    ):
        ev.evaluate(cfg)


def test_a_head_with_a_nan_or_an_inf_is_refused_naming_the_tensor_before_the_pair_loads(
    tmp_path, toy_tiny_dir, no_weights
):
    from diversed.models.heads import NonFiniteHead

    card = card_of(tmp_path, toy_tiny_dir)
    head = save_head(tmp_path / "run1" / "head", card, pair_identity=pair_record(card.identity))
    weights = head / "head.safetensors"
    state = load_file(weights)
    assert set(state) == {"net.0.weight", "net.0.bias"}  # the paper's head: one linear layer
    state["net.0.weight"][1, 3] = float("nan")
    state["net.0.bias"][0] = float("-inf")
    save_file(state, weights, metadata={"format": "pt"})
    named = (
        f"{weights} holds non-finite weights (net.0.bias: 1 ±inf of its 2 values; net.0.weight: 1 NaN of "
        f"its {state['net.0.weight'].numel()} values): its training diverged or the file is damaged"
    )
    cfg = compose_run("evaluate", tmp_path / "out", toy_tiny_dir, SMALL, [f"sweep.heads=[{head}]"])
    with pytest.raises(NonFiniteHead) as err:  # a UserError: exit status 2, the message alone
        ev.evaluate(cfg)
    assert str(err.value).startswith(f"sweep.heads entry {head}: {named}")
    assert not (tmp_path / "out" / "results.jsonl").exists()
    with pytest.raises(NonFiniteHead) as err:  # loading it directly says the same
        WeightHead.from_pretrained(head)
    assert str(err.value).startswith(named)


def test_a_head_with_non_finite_weights_is_never_saved(tmp_path):
    from diversed.models.heads import NonFiniteHead

    head = WeightHead(4, 6)
    with torch.no_grad():
        head.net[0].weight[0, 0] = float("inf")
    with pytest.raises(
        NonFiniteHead, match=r"saved .*\(net\.0\.weight: 1 ±inf of its 20 values\): nothing was written"
    ):
        head.save_pretrained(tmp_path / "head")
    assert not (tmp_path / "head").exists() or not any((tmp_path / "head").iterdir())


def test_same_pair_by_weights_hub_commit_and_random_shape():
    local = {
        "target": {"path": "/a/t", "weights": "1"},
        "draft": {"path": "/a/d", "weights": "2"},
        "dtype": "auto",
    }
    moved = {
        "target": {"path": "/b/t", "weights": "1"},
        "draft": {"path": "/b/d", "weights": "2"},
        "device": "cpu",
    }
    assert same_pair(pair_record(local), moved) is True
    assert same_pair(pair_record(local), {**moved, "draft": {"path": "/b/d", "weights": "3"}}) is False
    hub = {"target": {"id": "org/t", "commit": "c1"}, "draft": {"id": "org/d", "commit": None}}
    assert same_pair(hub, {**hub, "dtype": "bfloat16"}) is True
    assert same_pair(hub, {**hub, "target": {"id": "org/t", "commit": "c2"}}) is False
    assert same_pair(hub, {**hub, "target": {"id": "org/other", "commit": "c1"}}) is False
    assert same_pair(hub, {**hub, "target": local["target"]}) is None  # a Hub id against a local copy
    assert same_pair({"random": "r", "seed": 0}, {"random": "r", "seed": 1, "dtype": "auto"}) is False


def test_local_pairs_are_named_by_their_models(tmp_path):
    """Two `pair=local` pairs get two names (and two run directories), also when both drafts are
    `<run>/draft`; a name given is kept."""
    from hydra import compose, initialize_config_dir

    import diversed.config.runtime  # noqa: F401  (registers the resolvers, as every entry point does)
    from diversed import CONFIG_DIR

    def composed(*overrides):
        with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3", job_name="evaluate"):
            return compose(
                "evaluate",
                overrides=["pair=local", "pair.target=/models/Big", *overrides],
                return_hydra_config=True,
            )

    one, two = composed("pair.draft=/runs/a/draft"), composed("pair.draft=/runs/b/draft")
    assert one.pair.name.startswith("Big+draft-") and two.pair.name.startswith("Big+draft-")
    assert one.pair.name != two.pair.name and one.hydra.run.dir != two.hydra.run.dir
    assert composed("pair.draft=/runs/a/draft").pair.name == one.pair.name  # the same models, the same name
    assert composed("pair.draft=/runs/a/draft", "pair.name=mine").pair.name == "mine"


def test_one_check_of_a_head_against_a_pair(caplog):
    """`check_head`: hidden sizes (an unknown one is not compared), then the recorded models; preflight,
    `WeightHead.from_pretrained` and the engine all ask it."""
    from diversed.models.heads import check_head

    config = {"draft_hidden_size": 8, "target_hidden_size": 16, "pair": "mine"}
    assert check_head(config, draft_hidden_size=8, target_hidden_size=None) is None
    with pytest.raises(
        ValueError,
        match=r"head h was trained for hidden sizes \(draft_hidden_size=8, target_hidden_size=16\) "
        r"but the pair p has \(draft_hidden_size=8, target_hidden_size=32\) \(head pair: mine\)",
    ):
        check_head(config, draft_hidden_size=8, target_hidden_size=32, pair_name="p", head="head h")
    local = {"target": {"path": "/a/t", "weights": "1"}, "draft": {"path": "/a/d", "weights": "2"}}
    recorded = {**config, "pair_identity": pair_record(local)}
    assert (
        check_head(recorded, draft_hidden_size=8, target_hidden_size=16, identity=local, pair_name="p")
        is True
    )
    other = {**local, "draft": {"path": "/a/d", "weights": "3"}}
    with pytest.raises(ValueError, match="not on the pair being evaluated, p .*allow_other_pair_heads=true"):
        check_head(recorded, draft_hidden_size=8, target_hidden_size=16, identity=other, pair_name="p")
    with caplog.at_level("WARNING"):
        assert (
            check_head(
                recorded,
                draft_hidden_size=8,
                target_hidden_size=16,
                identity=other,
                pair_name="p",
                allow_other_pairs=True,
            )
            is False
        )
        assert (
            check_head(config, draft_hidden_size=8, target_hidden_size=16, identity=local, pair_name="p")
            is None
        )
    assert "evaluated on p" in caplog.text and "does not record which models" in caplog.text
