"""Killing a training run at a chosen point, and comparing a resumed run with the uninterrupted one."""

from __future__ import annotations

from pathlib import Path

import torch


class Killed(Exception):
    """A kill at a chosen point (Lightning saves nothing on an exception: as kill -9 after the last save)."""


def kill_at(monkeypatch, module_cls, hook: str, step: int) -> None:
    """Raise in `module_cls`'s `hook` (on_train_batch_start, on_validation_start) at `global_step == step`."""

    def die(self, *args):
        if self.global_step == step:
            raise Killed(f"{hook} at step {step}")

    monkeypatch.setattr(module_cls, hook, die, raising=False)


def csv_rows(run: Path) -> list[list[dict]]:
    """Each logger version's metric rows (the empty cells left out)."""
    import csv

    versions = sorted(run.glob("csv/version_*/metrics.csv"), key=lambda p: int(p.parent.name.split("_")[1]))
    return [[{k: v for k, v in r.items() if v != ""} for r in csv.DictReader(p.open())] for p in versions]


def assert_resumed_is_uninterrupted(
    ref: Path, run: Path, result: dict, ref_result: dict, exported: str
) -> None:
    """The final state (weights, optimizer, buffers), the export, the best step and the logged metrics."""
    from safetensors.torch import load_file

    a, b = (
        torch.load(r / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
        for r in (ref, run)
    )
    assert a["global_step"] == b["global_step"]
    assert a["state_dict"].keys() == b["state_dict"].keys()
    assert all(torch.equal(a["state_dict"][k], b["state_dict"][k]) for k in a["state_dict"])
    for sa, sb in zip(
        a["optimizer_states"][0]["state"].values(), b["optimizer_states"][0]["state"].values(), strict=True
    ):
        assert all(torch.equal(sa[k], sb[k]) for k in sa if torch.is_tensor(sa[k]))
    ea, eb = load_file(ref / exported), load_file(run / exported)
    assert all(torch.equal(ea[k], eb[k]) for k in ea)
    assert Path(result["best_checkpoint"]).name == Path(ref_result["best_checkpoint"]).name
    (whole,), (*before, after) = csv_rows(ref), csv_rows(run)
    assert before[0] == whole[: len(before[0])] and after == whole[len(whole) - len(after) :] and after
