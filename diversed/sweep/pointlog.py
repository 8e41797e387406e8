"""An evaluation's records to the configured loggers as points finish (`PointLog`): one CSV row per
grid point, and one row per point of a wandb Table (a killed job keeps what it logged). The columns are
the record's settings and results, the registered methods' knob fields among them.

The loggers themselves are made and closed by `config/runtime.py` (`make_loggers`, `finish`); what a
record holds is `results.py`'s.
"""

from __future__ import annotations

from typing import Any

from diversed.decoding.stats import RECORD_FIELDS
from diversed.sweep.methods import knobs


class PointLog:
    """An evaluation's records to its loggers as they are written: to wandb, one row per grid point
    of the Table `points` (the point's settings and results, `columns`; logged incrementally where
    wandb can, so a killed job keeps its rows), never as steps of a chart; to any other logger (CSV),
    the record's numbers and names as one row, the point's index as its step. The registered methods' knob
    fields are columns too (`columns`, after `num_draft_tokens`)."""

    COLUMNS = (
        "pair",
        "task",
        "method",
        "temperature",
        "num_draft_tokens",
        "seed",
        "n_examples",
        "score",
        "score_ci_low",
        "score_ci_high",
        *RECORD_FIELDS,
        "new_tokens",
        "wall_time_s",
        "normalized_time",
        "tokens_per_s",
        "latency_s",
        "normalized_latency",
        "key",
    )

    def __init__(self, loggers: list[Any]) -> None:
        self.loggers, self.rows, self.table = loggers, [], None
        self.columns = (*self.COLUMNS[:5], *knobs(), *self.COLUMNS[5:])  # the methods registered by now

    def add(self, record: dict[str, Any], index: int) -> None:
        self.rows.append([record.get(c) for c in self.columns])
        for lg in self.loggers:
            if type(lg).__name__ == "WandbLogger":
                lg.experiment.log({"points": self._table()})
            else:
                lg.log_metrics(
                    {k: v for k, v in record.items() if isinstance(v, int | float | str) and k != "key"},
                    step=index,
                )

    def _table(self) -> Any:
        import wandb

        try:  # a wandb with incremental tables: only the new rows are written each time
            if self.table is None:
                self.table = wandb.Table(
                    columns=list(self.columns), log_mode="INCREMENTAL", allow_mixed_types=True
                )
            self.table.add_data(*self.rows[-1])
            return self.table
        except TypeError:  # older wandb: the whole table again
            return wandb.Table(columns=list(self.columns), data=self.rows, allow_mixed_types=True)
