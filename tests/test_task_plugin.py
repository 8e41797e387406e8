"""A task of one's own registers as a method does, and `plugins=...` is one spelling for every entry point:
`plugin_task.py` (beside this file, outside `diversed/`) registers a task with `register_task`; loaded by
`plugins=` before Hydra composes, `task=toy_sum` chooses it with no yaml in the package, evaluate runs
it on the toy pair and the report names it."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest
from omegaconf import OmegaConf, open_dict
from tiny_models import compose_run

import diversed.evaluate as ev
from diversed.errors import ConfigError
from diversed.sweep import plugins
from diversed.sweep.results import ResultStore, load_results
from diversed.tasks import TASKS, load_task, task_config, unregister_task

SMALL = [
    "+experiment=toy",
    "task=toy_sum",
    "task.n_examples=4",
    "task.max_new_tokens=6",
    "sweep.batch_size=4",
    "sweep.draft_lengths=[2]",
    "sweep.temperatures=[1.0]",
    "timing.warmup=0",
    "timing.repeats=0",
    "runtime.progress=false",
    "sweep.num_seeds=1",
    "sweep.methods=[autoregressive,lossless]",
    "plugins=[plugin_task]",
]


@pytest.fixture
def started():
    """What an entry point does before Hydra composes, its command line naming the plugin: imported
    afresh (so it registers), its task's config in Hydra's store; the task removed afterwards."""
    sys.modules.pop("plugin_task", None)
    argv = ["evaluate", "plugins=plugin_task", "task=toy_sum"]
    plugins.start(argv)
    yield argv
    unregister_task("toy_sum")
    sys.modules.pop("plugin_task", None)


def test_a_task_of_ones_own_runs_through_evaluate_and_the_report_names_it(started, tmp_path, toy_tiny_dir):
    assert started[1] == "plugins=[plugin_task]"  # written back as the list the config holds
    assert "toy_sum" in TASKS and task_config("toy_sum")["strict"] is False
    run = tmp_path / "run"
    ev.evaluate(compose_run("evaluate", run, toy_tiny_dir, SMALL, ["task.strict=true"]))
    df = load_results(run)
    assert set(df.task) == {"toy_sum"} and set(df.metric) == {"holds_sum"} and len(df) == 2
    assert (df.strict == True).all()  # noqa: E712  its recorded option, in every record
    record = ResultStore(run).records()[0]
    assert record["settings"]  # keyed like any task's points

    from diversed.report import write_report

    write_report([run], tmp_path / "report", formats=("png",))
    assert "toy_sum" in (tmp_path / "report" / "README.md").read_text()


def test_a_bad_option_of_the_task_is_refused_before_the_pair_loads(started, tmp_path, toy_tiny_dir):
    cfg = compose_run("evaluate", tmp_path, toy_tiny_dir, SMALL, ["task.strict=maybe"])
    with open_dict(cfg):
        cfg.pair = OmegaConf.create({"_target_": "builtins.exec", "source": "raise AssertionError('loaded')"})
    with pytest.raises(ConfigError, match=r"task\.strict='maybe'"):
        ev.evaluate(cfg)


def test_an_unknown_task_names_the_registered_ones_and_how_to_load_a_plugin(tmp_path, toy_tiny_dir):
    with pytest.raises(
        ConfigError, match=r"unknown task 'nope'; registered: .*toy.*plugins=\[my_pkg\.my_task\]"
    ):
        load_task("nope")
    cfg = compose_run("evaluate", tmp_path, toy_tiny_dir, ["+experiment=toy", "task.name=nope"])
    with pytest.raises(
        ConfigError, match=r"task\.name='nope': unknown task 'nope'; registered: .*Adding a task"
    ):
        ev.evaluate(cfg)


def test_plugins_is_one_spelling_and_the_older_option_says_so(capsys):
    assert plugins.split_plugins(["a", "plugins=[x.y,z]", "b", "plugins=w", "+plugins=[]"]) == (
        ["a", "b"],
        ["x.y", "z", "w"],
    )
    parser = argparse.ArgumentParser()
    parser.add_argument("runs", nargs="*")
    plugins.add_plugin_option(parser)
    args = plugins.parse_args(parser, ["r1", "plugins=[json]", "r2", "--plugin", "csv"])
    assert args.runs == ["r1", "r2"]
    assert "--plugin is deprecated: write plugins=[csv]" in capsys.readouterr().err
    with pytest.raises(ConfigError, match=r"plugins\[0\]='no_such_plugin': cannot import it .*PYTHONPATH"):
        plugins.parse_args(parser, ["plugins=no_such_plugin"])
    with pytest.raises(SystemExit) as stopped:  # a Hydra entry point: the error alone, before composing
        plugins.start(["evaluate", "plugins=[no_such_plugin]"])
    assert stopped.value.code == 2 and "no_such_plugin" in capsys.readouterr().err
    # quotes kept by a shell, null and an empty list; a sweep over plugins is refused
    assert plugins.split_plugins(["plugins='[a,b]'", 'plugins="c"', "plugins=null", "plugins=[]"]) == (
        [],
        ["a", "b", "c"],
    )
    for sweep in ("plugins=[a],[b]", "plugins=choice(a,b)"):
        with pytest.raises(ConfigError, match="plugins is not a sweep axis"):
            plugins.split_plugins([sweep])


def test_start_leaves_hydra_one_plugins_list_and_takes_the_older_plus_on_a_plugin_knob(tmp_path, capsys):
    """Several plugins= words become one list where the first stood; `+sweep.<key>=` on a registered knob
    (what the README once asked of a plugin's knob) loses its `+`, which Hydra would refuse on a key
    that is there now; a plugin whose import raises is one error line, exit status 2."""
    sys.modules.pop("plugin_method", None)
    argv = ["evaluate", "-m", "plugins=plugin_method", "x=1", "+plugins=[json]", "+sweep.power_betas=[0.5]"]
    try:
        plugins.start(argv)
        assert argv == ["evaluate", "-m", "plugins=[plugin_method,json]", "x=1", "sweep.power_betas=[0.5]"]
    finally:
        from diversed.sweep.methods import unregister

        unregister("power")
        sys.modules.pop("plugin_method", None)
    broken = tmp_path / "broken_plugin.py"
    broken.write_text("raise ValueError('a knob clashes')\n")
    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(SystemExit) as stopped:
            plugins.start(["evaluate", "plugins=broken_plugin"])
    finally:
        sys.path.remove(str(tmp_path))
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and "importing it failed: ValueError: a knob clashes" in err, err
    assert "Traceback" not in err


def test_a_task_class_of_the_same_name_from_another_module_is_refused():
    from diversed.tasks import register_task
    from diversed.tasks.toy import ToyTask

    class Mine(ToyTask):
        name = "toy_mine"

    Other = type("Mine", (ToyTask,), {"name": "toy_mine", "__module__": "elsewhere"})
    Other.__qualname__ = Mine.__qualname__
    try:
        register_task("toy_mine", Mine)
        register_task("toy_mine", Mine)  # the same class again (its module imported again): taken
        with pytest.raises(ValueError, match="a task named 'toy_mine' is registered already"):
            register_task("toy_mine", Other)
    finally:
        unregister_task("toy_mine")


def test_a_packages_task_entry_point_registers_its_class_and_a_broken_one_is_named(monkeypatch):
    """An entry point of the `diversed.tasks` group names a Task class (registered under its name) or a
    module; one that cannot be imported is a ConfigError naming it and the fix."""
    import importlib.metadata

    import diversed.tasks as tasks

    sys.modules.pop("plugin_task", None)
    import plugin_task  # registers toy_sum on import: taken out again, the entry point must bring it back

    unregister_task("toy_sum")
    good = importlib.metadata.EntryPoint("toy_sum", "plugin_task:ToySum", tasks.ENTRY_POINT_GROUP)
    listed = {tasks.ENTRY_POINT_GROUP: [good]}
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group=None: listed.get(group, []))
    monkeypatch.setattr(tasks, "_entry_points_loaded", False)
    try:
        tasks.load_entry_points()
        assert TASKS["toy_sum"] is plugin_task.ToySum
        bad = importlib.metadata.EntryPoint("gone", "no_such_package.tasks", tasks.ENTRY_POINT_GROUP)
        listed[tasks.ENTRY_POINT_GROUP] = [bad]
        monkeypatch.setattr(tasks, "_entry_points_loaded", False)
        with pytest.raises(
            ConfigError, match=r"diversed.tasks entry point gone = no_such_package.tasks cannot"
        ):
            tasks.load_entry_points()
    finally:
        unregister_task("toy_sum")
        sys.modules.pop("plugin_task", None)


def test_the_readers_load_plugins_without_importing_the_tasks_or_torch():
    """plot and show load `plugins=` (and the methods' entry points) torch-free: the tasks, whose
    entry points are loaded where a task is looked up, import torch."""
    code = (
        "import sys, argparse, diversed.plot, diversed.show; from diversed.sweep import plugins; "
        "p = argparse.ArgumentParser(); plugins.add_plugin_option(p); "
        "plugins.parse_args(p, ['plugins=json']); "
        "assert not {'torch', 'diversed.tasks'} & set(sys.modules), sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
