"""A method owns what it loads: every knob whose values are paths (a head, a fine-tuned draft, a plugin's
own file) is checked before any weights load, digested into its points' settings and loaded through the
knob (`methods.Files`), never by a method's name. `plugin_resources.py` (beside this file, outside
`diversed/`) has a method that reuses the built-in `HEAD` knob and one with a path knob of its own."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from omegaconf import OmegaConf, open_dict
from tiny_models import compose_run

import diversed
import diversed.evaluate as ev
from diversed.errors import ConfigError
from diversed.files.provenance import digest, directory_digest, file_digest
from diversed.sweep import methods
from diversed.sweep.grid import grid
from diversed.sweep.resources import Resources, check_resources
from diversed.sweep.results import ResultStore, grid_key, load_results

SMALL = [
    "+experiment=toy",
    "task.n_examples=4",
    "task.max_new_tokens=6",
    "sweep.batch_size=4",
    "sweep.draft_lengths=[2]",
    "sweep.temperatures=[0.0,1.0]",
    "timing.warmup=0",
    "timing.repeats=0",
    "runtime.progress=false",
    "sweep.num_seeds=1",
    "plugins=[plugin_resources]",
]


@pytest.fixture
def plugin():
    """The plugin's methods registered (as importing it does), removed again afterwards."""
    import plugin_resources

    for m in (plugin_resources.SCALED, plugin_resources.FILE):
        methods.register(m)
    yield plugin_resources
    for m in (plugin_resources.SCALED, plugin_resources.FILE):
        methods.unregister(m.name)


@pytest.fixture(scope="module")
def heads(toy_tiny_dir, tmp_path_factory):
    """Two saved heads that fit the tiny toy pair."""
    from diversed import WeightHead

    target = json.loads((toy_tiny_dir / "target" / "config.json").read_text())
    draft = json.loads((toy_tiny_dir / "draft" / "config.json").read_text())
    out = tmp_path_factory.mktemp("heads")
    for name in ("a", "b"):
        WeightHead(draft["hidden_size"], target["hidden_size"]).save_pretrained(out / name, pair="tiny-toy")
    return [str(out / "a"), str(out / "b")]


def no_pair(cfg):
    """`cfg` whose pair raises if it is ever loaded: what is refused is refused before any weights."""
    with open_dict(cfg):
        cfg.pair = OmegaConf.create(
            {"_target_": "builtins.exec", "source": "raise AssertionError('pair loaded')"}
        )
    return cfg


def test_a_method_reusing_the_head_knob_alone_gets_its_head_points(plugin, tmp_path, toy_tiny_dir, heads):
    """With `sweep.methods=[autoregressive, scaled_dynamic]` (no `dynamic`): one point per head × N × T,
    each keyed by its head's files exactly as `dynamic`'s points are."""
    methods_ = "sweep.methods=[autoregressive,scaled_dynamic]"
    cfg = compose_run(
        "evaluate", tmp_path, toy_tiny_dir, SMALL, [methods_, f"sweep.heads=[{','.join(heads)}]"]
    )
    ev.evaluate(cfg)
    df = load_results(tmp_path)
    scaled = df[df.method == "scaled_dynamic"]
    assert len(scaled) == 2 * 1 * 2  # heads × N × T
    assert sorted(set(scaled["head"])) == heads
    assert scaled.mean_w.between(0.7, 0.8).all()  # an untrained head's w = 0.5, its 1 − w halved: 0.75
    for record in ResultStore(tmp_path).records():
        if record["method"] == "scaled_dynamic":
            settings = json.loads((tmp_path / "settings" / f"{record['settings']}.json").read_text())
            assert settings["head"] == directory_digest(record["head"])  # the head's files key its points
            assert record["head_task"] is None  # a head's record fields come with it (untrained: no task)
    # the same head's points of dynamic and of the plugin have the same settings: its files, as "head"
    found = check_resources(None, {"methods": ["dynamic", "scaled_dynamic"], "heads": heads})
    for head in heads:
        mine, theirs = ({"method": m, "head": head} for m in ("scaled_dynamic", "dynamic"))
        assert found.settings(mine) == found.settings(theirs) == {"head": directory_digest(head)}


def test_a_missing_head_of_the_plugin_is_refused_before_the_pair_loads(plugin, tmp_path, toy_tiny_dir):
    overrides = ["sweep.methods=[autoregressive,scaled_dynamic]", "sweep.heads=[no/such/head]"]
    cfg = no_pair(compose_run("evaluate", tmp_path, toy_tiny_dir, SMALL, overrides))
    with pytest.raises(
        ConfigError, match=r"sweep\.heads entry no/such/head .*no such directory.*leave scaled_dynamic out"
    ):
        ev.evaluate(cfg)


def test_a_path_knob_without_a_loader_hands_the_verifier_its_path(plugin, tmp_path, toy_tiny_dir):
    """The defaults of a plugin's own path knob: checked to exist, its content in the settings under the
    knob's field, the path itself given to the verifier (which reads w = 1 from it: static w = 1's points,
    not static w = 0's)."""
    one = tmp_path / "w1.txt"
    one.write_text("1.0")
    run = tmp_path / "run"
    # seed 1: draws where w = 1 rejects a draft within the 4 x 6 tokens (the comparison with w = 0 below)
    overrides = ["sweep.methods=[autoregressive,static,weight_file]", "sweep.weights=[0.0,1.0]", "seed=1"]
    cfg = compose_run("evaluate", run, toy_tiny_dir, SMALL, [*overrides, f"sweep.weight_files=[{one}]"])
    ev.evaluate(cfg)
    store = ResultStore(run)
    records = {(r["method"], r.get("weight")): r for r in store.records() if r["temperature"] == 1.0}
    mine = records[("weight_file", None)]
    assert mine["weight_file"] == str(one)
    completions = {k: [e["completion"] for e in store.examples(r["key"])] for k, r in records.items()}
    assert completions[("weight_file", None)] == completions[("static", 1.0)]  # w = 1 read from the file
    assert records[("static", 0.0)]["acceptance_rate"] == 1.0 > mine["acceptance_rate"]  # (w = 0 differs)
    assert mine["acceptance_rate"] == records[("static", 1.0)]["acceptance_rate"]
    settings = json.loads((run / "settings" / f"{mine['settings']}.json").read_text())
    assert settings["weight_file"] == file_digest(one)

    overrides = ["sweep.methods=[autoregressive,weight_file]", "sweep.weight_files=[no/such/file.txt]"]
    cfg = no_pair(compose_run("evaluate", tmp_path / "r2", toy_tiny_dir, SMALL, overrides))
    with pytest.raises(
        ConfigError, match=r"sweep\.weight_files entry no/such/file\.txt: there is no such file"
    ):
        ev.evaluate(cfg)


def test_the_keys_of_heads_and_fine_tuned_drafts_are_as_before():
    """A fixed grid's keys, head and draft digests given: as the tree before knobs owned their files
    computed them (its `_sweep` added {"head": ..., "draft": ...} by method name), so run directories
    resume."""
    sweep = {
        "methods": ["autoregressive", "lossless", "dynamic", "finetuned_draft"],
        "draft_lengths": [2],
        "temperatures": [0.0, 1.0],
    }
    found = Resources(
        [methods.DRAFT_MODEL, methods.HEAD],
        {"draft_model": {"/d/x": "draftdigest"}, "head": {"/h/a": "headdigest"}},
    )
    common = {"task": {"task": "toy"}, "batch_size": 4, "seed": 0}
    meta = {"pair": "p", "task": "toy", "n_examples": 3, "metric": "exact_match", "split": "test"}
    keys = []
    for p in grid(sweep, found.paths()):
        settings = digest({**common, "seed": 0, **found.settings(p)})
        keys.append(grid_key(**meta, **p, seed=0, settings=settings))
    assert keys[3] == (
        "pair=p|task=toy|method=dynamic|weight=null|head=/h/a|num_draft_tokens=2|temperature=0.0|seed=0|"
        "n_examples=3|settings=07cd14d93e0297f6"
    )
    assert keys[2].endswith("draft_model=/d/x|settings=2da0c6f4b22fc19e")
    assert digest(keys) == "44da174f62362b90"  # all eight, computed by the tree before (/work/base45)


def test_path_knobs_declare_their_files_and_the_built_in_ones_are_exported():
    assert diversed.HEAD is methods.HEAD and diversed.DRAFT_MODEL is methods.DRAFT_MODEL
    assert diversed.WEIGHT is methods.WEIGHT and diversed.LENIENCE is methods.LENIENCE
    assert (methods.HEAD.files.settings, methods.DRAFT_MODEL.files.settings) == ("head", "draft")
    assert methods.DRAFT_MODEL.files.replaces_draft and not methods.HEAD.files.replaces_draft
    mine = methods.Knob("my_file", "my_files", "f", type=str, path=True)
    assert mine.files == methods.Files(settings="my_file")  # the defaults: exists, digested, the path
    assert methods.WEIGHT.files is None
    with pytest.raises(ValueError, match="path=True"):
        methods.Knob("x", "xs", "x", files=methods.Files())
    with pytest.raises(ValueError, match="module:function"):
        methods.Files(load="not a function")
    with pytest.raises(ValueError, match="callable"):
        methods.Files(load=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="checked before any weights load"):
        methods.Files(check="")

    def load(paths, pair):  # a plugin may give its loader itself
        return {p: p.upper() for p in paths}

    assert methods.Files.function(methods.Files(load=load).load)(["a"], None) == {"a": "A"}
    assert methods.Files.function(methods.HEAD.files.check).__name__ == "check_heads"
    # the registry stays free of torch: a knob's functions are imported when a sweep needs them
    code = "import sys, diversed.sweep.methods; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_one_path_under_two_knobs_that_load_it_differently_is_refused(plugin, tmp_path):
    """Loaded objects are keyed by path: a head given also as a plugin's own path knob (loaded as the path
    itself) would hand `dynamic` a string; refused before anything loads."""
    from diversed.sweep.resources import check_resources

    head = tmp_path / "head"
    head.mkdir()
    sweep = {"methods": ["dynamic", "weight_file"], "heads": [str(head)], "weight_files": [str(head)]}
    with pytest.raises(ConfigError, match=r"is in sweep\.heads and in sweep\.weight_files"):
        check_resources(None, sweep)
