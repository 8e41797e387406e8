"""The sandbox against hostile programs (tests/sandbox/hostile.py), run through the public task API
(`MBPP(...).execute()`) by a separate caller process (tests/sandbox/evaluator.py) that holds a
secret in its environment, a marker in its memory, canary files, a victim process and listeners.

Four batches run at once: every layer this machine has ("full"), and each layer alone, with the
cases that layer is meant to close. Each case checks its verdict and that it left nothing behind
(no file, no process, no heartbeat, no secret in its output); each batch checks the caller's
side (marker, canaries, signals, listeners, limits, mounts) and, for a single layer, that the
missing ones were warned about.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from sandbox import hostile

from diversed.tasks import confine, execution

REPO = Path(__file__).resolve().parents[1]
EVALUATOR = REPO / "tests" / "sandbox" / "evaluator.py"
TIMEOUT = 3.0  # per program
WORKERS = 4  # per batch; timeouts mostly sleep
CONFIGS = {"full": None, "bwrap": "bwrap", "landlock": "landlock", "seccomp": "seccomp"}


def _planned(config: str) -> tuple[frozenset[str], list[hostile.Case]] | str:
    """The layers a batch runs with and its cases, or why it cannot run here."""
    available = frozenset(name for name, why in execution.probe_layers().items() if why is None)
    layer = CONFIGS[config]
    if layer is not None and layer not in available:
        return f"{layer} is not available here: {execution.probe_layers()[layer]}"
    active = available if layer is None else frozenset({layer})
    if not active:
        return "no sandbox layer is available here"
    abi = confine.landlock_abi()
    once = layer is None  # the cases that do not depend on the layers run in one batch
    return active, [c for c in hostile.CASES if c.closed_by(active, abi) and (once or "once" not in c.layers)]


def _params() -> list:
    out = []
    for config, layer in CONFIGS.items():
        asked = hostile.ALL | hostile.ONCE if layer is None else frozenset({layer, "guard"})
        out += [
            pytest.param(config, c.name, id=f"{config}-{c.name}") for c in hostile.CASES if c.layers & asked
        ]
    return out


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict | str]:
    """Run the batches, all at once; config -> report, or why it did not run."""
    running, out = {}, {}
    for config in CONFIGS:
        plan = _planned(config)
        if isinstance(plan, str):
            out[config] = plan
            continue
        active, cases = plan
        root = tmp_path_factory.mktemp(f"sandbox-{config}")
        (root / "home").mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DIVERSED_", "DVX_"))}
        env.update(
            DIVERSED_SANDBOX=CONFIGS[config] or "", DVX_SECRET=secrets.token_hex(16), HOME=str(root / "home")
        )
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        spec = {
            "config": config,
            "cases": [c.name for c in cases],
            "out": str(root),
            "repo": str(REPO),
            "timeout": TIMEOUT,
            "workers": WORKERS,
            "require": sorted(active),
        }
        (root / "spec.json").write_text(json.dumps(spec))
        proc = subprocess.Popen(
            [sys.executable, str(EVALUATOR), str(root / "spec.json")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=root,
            start_new_session=True,
            text=True,
        )
        running[config] = (proc, env["DVX_SECRET"], active)
    for config, (proc, secret, active) in running.items():
        try:
            stdout, stderr = proc.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        try:
            report = json.loads(stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            report = {"error": f"the evaluator failed (exit {proc.returncode}): {stderr[-3000:]}"}
        out[config] = {**report, "secret": secret, "expected_active": active}
    return out


def _report(reports: dict, config: str) -> dict:
    report = reports[config]
    if isinstance(report, str):
        pytest.skip(report)
    assert "error" not in report, report["error"]
    return report


@pytest.mark.parametrize(("config", "name"), _params())
def test_hostile_case(reports: dict, config: str, name: str) -> None:
    report = _report(reports, config)
    if name not in report["results"]:
        pytest.skip(f"not closed by the layers enforced here ({report['active']})")
    case, r = hostile.BY_NAME[name], report["results"][name]
    tag = f"{config}-{name}"
    assert r["status"] == case.expected(frozenset(report["active"])), r
    assert r["seconds"] < TIMEOUT + execution.BACKSTOP_S, r  # bounds a hang; the monitor's timeout acts first
    all_secrets = [
        s for rep in reports.values() if isinstance(rep, dict) and "secret" in rep for s in [rep["secret"]]
    ]
    assert not [s for s in all_secrets if s in r["output"]], "a secret of a caller reached the program"
    assert f"ESCAPED-{tag}" not in r["output"], "a binary ran"
    assert name not in report["alive"], "the program still runs after execute() returned"
    assert f"hb-{tag}" not in report["heartbeats"], "heartbeats after execute() returned"
    assert f"ran-{tag}" not in report["changed"] and not [p for p in report["leftovers"] if p.endswith(tag)]
    assert name not in report["sysv"], "a shared-memory segment outlived the program"


@pytest.mark.parametrize("config", CONFIGS)
def test_the_caller_is_untouched(reports: dict, config: str) -> None:
    report = _report(reports, config)
    summary = {n: (r["status"], r["output"][-200:]) for n, r in report["results"].items()}
    assert report["marker"] == "DVX-MARKER-INTACT", summary
    assert report["changed"] == [] and report["leftovers"] == [], (report["changed"], report["leftovers"])
    assert report["usr1"] == 0 and report["victim_alive"], "a program signalled the caller or its victim"
    assert not (report["tcp"] or report["udp"] or report["unix"] or report["abstract"]), (
        "a program reached a listener"
    )
    assert report["nofile"] and report["nice"], "a program changed the caller's limits or priority"
    assert not report["mounted"], "a program mounted a file system"
    assert report["sysv"] == [], "a shared-memory segment outlived its program"
    assert report["alive"] == [] and report["heartbeats"] == []


@pytest.mark.parametrize("config", [c for c, layer in CONFIGS.items() if layer])
def test_a_missing_layer_is_warned_about(reports: dict, config: str) -> None:
    report = _report(reports, config)
    assert report["active"] == [CONFIGS[config]]
    for layer in execution.LAYERS:
        said = [w for w in report["warnings"] if w.startswith(f"diversed sandbox: {layer} not enforced")]
        assert bool(said) == (layer != CONFIGS[config]), report["warnings"]
    protected = any("made itself non-dumpable" in w for w in report["warnings"])
    assert protected == (config == "seccomp")


def test_the_suite_is_big_enough() -> None:
    assert len(hostile.CASES) >= 40
    assert sum(c.expected(frozenset()) != "passed" for c in hostile.CASES) >= 40
