"""A method of one's own in one file, no edit to the package: `plugin_method.py` (beside this file, outside
`diversed/`) defines a verifier with one knob and registers it through the public API; evaluate sweeps it,
plot draws it and report tabulates it with its knob named by its symbol; bad values of its knob are refused
before the pair loads; its records without the plugin loaded are refused naming the option that loads it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf, open_dict
from tiny_models import compose_run

import diversed.evaluate as ev
from diversed.errors import ConfigError
from diversed.sweep import methods
from diversed.sweep.results import ResultStore, load_results

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
SMALL = [
    "+experiment=toy",
    "task.n_examples=4",
    "task.max_new_tokens=6",
    "sweep.batch_size=4",
    "sweep.draft_lengths=[2]",
    "sweep.temperatures=[1.0]",
    "timing.warmup=0",
    "timing.repeats=1",
    "runtime.progress=false",
    "sweep.num_seeds=1",
    "sweep.methods=[autoregressive,lossless,power]",
    "plugins=[plugin_method]",
]


@pytest.fixture
def plugin():
    """The plugin's method registered (as importing `plugin_method` does), and removed again afterwards so
    that the other tests see the built-in registry."""
    import plugin_method

    methods.register(plugin_method.METHOD)
    yield plugin_method
    methods.unregister("power")


@pytest.fixture
def swept(plugin, tmp_path, toy_tiny_dir):
    """A run directory where evaluate swept the plugin's β over [0.2, 0.5, 1.0] beside AR and lossless SD."""
    run = tmp_path / "run"
    ev.evaluate(compose_run("evaluate", run, toy_tiny_dir, SMALL, ["sweep.power_betas=[0.2,0.5,1.0]"]))
    return run


def test_the_package_does_not_name_the_plugin():
    for path in (ROOT / "diversed").rglob("*"):
        if path.is_file() and path.suffix in (".py", ".yaml"):
            text = path.read_text()
            assert "plugin_method" not in text and "power_beta" not in text, path


def test_evaluate_sweeps_a_registered_method_by_its_knob(swept, toy_tiny_dir, monkeypatch):
    df = load_results(swept)
    power = df[df.method == "power"].sort_values("power_beta")
    assert power.power_beta.tolist() == [0.2, 0.5, 1.0]  # its knob is its own record field ...
    assert power.key.nunique() == 3 and all(
        "|power_beta=" in k for k in power.key
    )  # ... and part of each key
    assert df[df.method != "power"].power_beta.isna().all()
    assert power.acceptance_rate.is_monotonic_decreasing  # a smaller β accepts more
    # β = 1 is the lossless test on the same uniforms: lossless SD's very tokens
    store = ResultStore(swept)

    def completions(method, beta=None):
        record = next(r for r in store.records() if r["method"] == method and r.get("power_beta") == beta)
        return [e["completion"] for e in store.examples(record["key"])]

    assert completions("power", 1.0) == completions("lossless")
    ran = {"n": 0}
    monkeypatch.setattr(ev, "run_point", lambda *a, **k: ran.__setitem__("n", ran["n"] + 1))
    ev.evaluate(compose_run("evaluate", swept, toy_tiny_dir, SMALL, ["sweep.power_betas=[0.2,0.5,1.0]"]))
    assert ran["n"] == 0  # the same sweep again: every point is done (the knob is in the resume key)


def test_the_plugin_verifier_runs_on_the_engine_as_the_built_in_ones(plugin):
    """On a pair whose p and q differ (the toy's tiny pair nearly agrees): β = 1 is lossless SD token for
    token, and a smaller β accepts more."""
    import torch
    from tiny_models import ragged_prompts, tiny_pair

    from diversed import Lossless, speculative_generate

    target, draft = tiny_pair()
    ids, mask = ragged_prompts()

    def run(verifier):
        return speculative_generate(
            target,
            draft,
            ids,
            mask,
            verifier=verifier,
            num_draft_tokens=3,
            max_new_tokens=24,
            do_sample=True,
            generator=torch.Generator().manual_seed(4),
        )

    lossless, one, low = run(Lossless()), run(plugin.PowerAcceptance(1.0)), run(plugin.PowerAcceptance(0.2))
    assert torch.equal(one.sequences, lossless.sequences)
    assert low.stats.acceptance_rate > one.stats.acceptance_rate


def test_the_plugin_knobs_default_grid_is_swept_when_the_config_lists_none(plugin, tmp_path, toy_tiny_dir):
    cfg = compose_run("evaluate", tmp_path, toy_tiny_dir, SMALL)
    with open_dict(cfg):
        del cfg.sweep["power_betas"]  # as composed before the plugin was imported (plugins=[...] only)
    points = [p for p in ev.grid(cfg.sweep, {}) if p["method"] == "power"]
    assert [p["power_beta"] for p in points] == list(plugin.BETA.default)


def test_plot_draws_it_and_report_tabulates_it_with_its_knob_named(swept, tmp_path):
    from diversed.analysis.compare import mean_over_seeds
    from diversed.analysis.drawing import _legend, plot_pareto, summary_table
    from diversed.report import write_report

    df = load_results(swept)
    table = summary_table(df)
    labels = [label for _, label in table.index]
    assert [x for x in labels if x.startswith("Power")] == ["Power β=1", "Power β=0.5", "Power β=0.2"]
    legend = [h.get_label() for h in _legend(mean_over_seeds(df, examples=False), {})]
    assert "Power, β labelled" in legend  # a line over β, the legend naming the knob by its symbol
    assert plot_pareto(df, tmp_path / "plots", formats=("png",))

    write_report([swept], tmp_path / "report", formats=("png",))
    text = (tmp_path / "report" / "table_T1.md").read_text()
    row = next(line for line in text.splitlines() if "| Power" in line)
    assert "Power, oracle (chosen on test)" in row and "(β=" in row  # the row, its chosen β named


def test_records_of_a_method_not_loaded_are_refused_naming_the_plugin_option(swept, monkeypatch):
    methods.unregister("power")
    with pytest.raises(
        ConfigError, match=r"records of 'power'.*plugins=\[my_pkg\.my_method\] on the command line"
    ):
        load_results(swept)
    # a package's entry point of the diversed.methods group is loaded when records name a method
    # not registered
    import importlib.metadata

    point = importlib.metadata.EntryPoint(
        name="power", value="plugin_method:METHOD", group=methods.ENTRY_POINT_GROUP
    )
    monkeypatch.setattr(
        importlib.metadata, "entry_points", lambda group=None: [point] if group == point.group else []
    )
    monkeypatch.setattr(methods, "_entry_points_loaded", False)
    assert set(load_results(swept).method) == {"autoregressive", "lossless", "power"}


def test_bad_values_of_a_plugin_knob_are_refused_before_the_pair_loads(plugin, tmp_path, toy_tiny_dir):
    for override, message in (
        (
            "sweep.power_betas=[0.5,1.5]",
            r"sweep\.power_betas\[1\]=1\.5: β \(the power on p/q, 1 = lossless\) "
            r"must be a number in \(0, 1\]",
        ),
        ("sweep.power_betas=[0]", r"sweep\.power_betas\[0\]=0: β .* must be a number in \(0, 1\]"),
        ("sweep.power_betas=[x]", r"sweep\.power_betas\[0\]='x'"),
        (
            "+sweep.power_beta=[0.5]",
            r"sweep\.power_beta=\[0\.5\]: unknown key; did you mean sweep\.power_betas\?",
        ),
    ):
        cfg = compose_run("evaluate", tmp_path, toy_tiny_dir, SMALL, [override])
        with open_dict(cfg):
            cfg.pair = OmegaConf.create(
                {"_target_": "builtins.exec", "source": "raise AssertionError('pair loaded')"}
            )
        with pytest.raises(ConfigError, match=message):
            ev.evaluate(cfg)


def test_a_plugin_that_cannot_be_imported_is_named_with_the_fix(tmp_path, toy_tiny_dir):
    cfg = compose_run("evaluate", tmp_path, toy_tiny_dir, SMALL, ["plugins=[no_such_plugin]"])
    with pytest.raises(ConfigError, match=r"plugins\[0\]='no_such_plugin': cannot import it .*PYTHONPATH"):
        ev.evaluate(cfg)
    cfg = compose_run(
        "evaluate", tmp_path, toy_tiny_dir, [*SMALL[:-1], "sweep.methods=[autoregressive,power]"]
    )
    with pytest.raises(ConfigError, match=r"unknown methods \['power'\].*plugins=\[my_pkg\.my_method\]"):
        ev.evaluate(cfg)  # the method named, its module not loaded


def test_a_knob_that_clashes_with_a_registered_one_is_refused():
    with pytest.raises(ValueError, match="clashes with the registered knob weight"):
        methods.register(
            methods.Method(
                "mine",
                "Mine w={weight:g}",
                verifier=lambda p, h: None,
                knobs=(methods.Knob("weight", "weights", "w", interval="[0, 2]"),),
            )
        )
    with pytest.raises(ValueError, match="registered already"):
        methods.register(methods.Method("static", "Mine", verifier=lambda p, h: None))
    with pytest.raises(ValueError, match=r"names \['beta'\], which are not its knobs' fields"):
        methods.Method("mine", "Mine β={beta:g}", verifier=lambda p, h: None)
    with pytest.raises(ValueError, match="interval"):
        methods.Knob("beta", "betas", "β", interval="0 to 1")
    assert "mine" not in methods.METHODS


@pytest.mark.slow
def test_the_command_lines_load_it_with_the_plugin_option(tmp_path, toy_tiny_dir):
    """evaluate, report and plot with `plugins=[...]` as a shell runs them (tests/ on PYTHONPATH), the
    plugin's knob without a `+`; report without it stops with the option named; the older `--plugin`
    still works, with one line naming the new spelling."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(ROOT)]), "HF_HUB_OFFLINE": "1"}
    run = tmp_path / "run"
    pair = [
        "pair=local",
        f"pair.target={toy_tiny_dir}/target",
        f"pair.draft={toy_tiny_dir}/draft",
        "pair.name=tiny-toy",
        "pair.device=cpu",
        "pair.dtype=float32",
    ]
    sweep = [o for o in SMALL if not o.startswith("sweep.methods")] + [
        "sweep.methods=[autoregressive,power]",
        "sweep.power_betas=[0.3,1.0]",
    ]

    def python(*args):
        return subprocess.run(
            [sys.executable, *args], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600
        )

    done = python("-m", "diversed.evaluate", *sweep, *pair, f"hydra.run.dir={run}")
    assert done.returncode == 0, done.stderr[-3000:]
    report = python(
        "-m",
        "diversed.report",
        str(run),
        "--out",
        str(tmp_path / "report"),
        "--formats",
        "png",
        "plugins=[plugin_method]",
    )
    assert report.returncode == 0, report.stderr[-3000:]
    assert "(β=" in (tmp_path / "report" / "table_T1.md").read_text()
    plot = python(
        "-m",
        "diversed.plot",
        str(run),
        "--out",
        str(tmp_path / "plots"),
        "--formats",
        "png",
        "--plugin",
        "plugin_method",
    )
    assert plot.returncode == 0, plot.stderr[-3000:]
    assert "--plugin is deprecated: write plugins=[plugin_method]" in plot.stderr
    assert "Power β=0.3" in (tmp_path / "plots" / "table_all.md").read_text()
    refused = python("-m", "diversed.report", str(run), "--out", str(tmp_path / "r2"))
    assert (
        refused.returncode == 2
        and "plugins=[my_pkg.my_method]" in refused.stderr
        and "Traceback" not in refused.stderr
    )
