"""notebooks/pareto_fronts.ipynb run headless, as `jupyter-execute` runs it (the kernel in the notebook's
folder, `DIVERSED_RESULTS` read from the directory the command was typed in): on run directories of two
tasks and an empty folder it draws what is there and says what it skipped; on an empty folder alone it
says what `python -m diversed.report` says, not a KeyError."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from diversed.errors import MissingFile
from diversed.report import load_runs
from diversed.sweep.results import ResultStore

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "pareto_fronts.ipynb"
FIXTURE = Path(__file__).parent / "fixtures" / "results_small.jsonl"


def run_dir(path: Path, task: str) -> Path:
    """A run directory as evaluate writes it, holding the fixture's records of `task`."""
    store = ResultStore(path)
    for line in FIXTURE.read_text().splitlines():
        if (rec := json.loads(line))["task"] == task:
            row = dict(example_id="0", completion="", score=rec["score"], new_tokens=1, accepted_drafts=0)
            store.write(rec, [row])
    return path


def execute(tmp_path: Path, monkeypatch, results: str) -> nbformat.NotebookNode:
    """The notebook executed with DIVERSED_RESULTS=`results` typed in `tmp_path`; its outputs filled in
    (also when a cell fails: CellExecutionError)."""
    # A kernelspec for this interpreter, so the test never depends on kernels installed by hand.
    spec = tmp_path / "jupyter" / "kernels" / "diversed-test"
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "test", "language": "python"})
    )
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("PWD", str(tmp_path))  # the shell's directory; the kernel runs in notebooks/
    monkeypatch.setenv("DIVERSED_RESULTS", results)
    monkeypatch.setenv("DIVERSED_PLOTS", "plots")

    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not c.outputs and c.execution_count is None for c in nb.cells if c.cell_type == "code")
    client = NotebookClient(
        nb, kernel_name="diversed-test", timeout=120, resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    )
    try:
        client.execute()
    except CellExecutionError:
        pass  # the caller reads the error from the outputs
    return nb


def outputs(nb: nbformat.NotebookNode) -> list:
    return [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]


def test_the_notebook_draws_what_is_there_and_says_what_it_skipped(tmp_path, monkeypatch):
    run_dir(tmp_path / "gsm8k_runs" / "multirun" / "0", "gsm8k")  # found recursively, as in a multirun
    run_dir(tmp_path / "cnndm_runs", "cnndm")  # another task
    (tmp_path / "empty").mkdir()  # no records

    out = outputs(execute(tmp_path, monkeypatch, "gsm8k_runs cnndm_runs empty"))

    assert not [o for o in out if o.output_type == "error"]
    said = "".join(o.get("text", "") for o in out if o.output_type == "stream")
    assert f"{tmp_path / 'gsm8k_runs'}: 18 run records (tiny-pair · gsm8k)" in said
    assert f"{tmp_path / 'cnndm_runs'}: 15 run records (tiny-pair · cnndm)" in said
    assert f"skipped {tmp_path / 'empty'}: no run records there" in said
    assert "not in this table: T=0 N=4" in said  # the table's slice is N = 2, T = 0
    figures = {
        "pareto_tiny-pair_gsm8k_T0.png",
        "pareto_tiny-pair_gsm8k_T1.png",
        "pareto_tiny-pair_cnndm_T0.png",
    }
    assert sum("image/png" in o.get("data", {}) for o in out) == len(figures)  # one per (pair, task, T)
    assert {p.name for p in (tmp_path / "plots").iterdir()} == figures  # under the shell's directory
    html = "".join(o.get("data", {}).get("text/html", "") for o in out)
    assert "DIVERSED (tiny-pair/head)" in html and "Static w=0.5" in html  # the summary table
    assert "gsm8k" in html and "rouge2" in html  # both tasks' columns


def test_the_notebook_on_an_empty_folder_says_what_the_cli_says(tmp_path, monkeypatch):
    (tmp_path / "empty").mkdir()
    with pytest.raises(MissingFile) as cli:  # what python -m diversed.report prints after "error: "
        load_runs([tmp_path / "empty"])

    errors = [o for o in outputs(execute(tmp_path, monkeypatch, "empty")) if o.output_type == "error"]

    assert [(e.ename, e.evalue) for e in errors] == [("MissingFile", str(cli.value))]
    assert "give run directories of python -m diversed.evaluate" in errors[0].evalue
    assert len(errors[0].traceback) <= 2  # the message alone (and IPython's "%tb" hint), no traceback
