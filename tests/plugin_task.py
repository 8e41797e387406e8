"""A task of one's own, defined OUTSIDE the package and registered through the public API (README,
"Adding a task"): `plugins=[plugin_task]` loads it (tests/ on PYTHONPATH), `task=toy_sum` chooses it,
with no yaml file in the package. Nothing in `diversed/` names it.

The toy pair's additions, scored by whether the completion holds the sum anywhere (not only its last
number); its one option, `strict`, scores as the toy task does instead.
"""

from __future__ import annotations

from typing import Any, ClassVar

from diversed import Option, register_task
from diversed.tasks.toy import ToyTask


class ToySum(ToyTask):
    name: ClassVar[str] = "toy_sum"
    metric: ClassVar[str] = "holds_sum"
    options: ClassVar[dict[str, Option]] = {
        "strict": Option(False, bool, "true: the last number must be the sum (the toy task's rule)")
    }
    strict: bool

    def score(self, example: dict[str, Any], completion: str) -> float:
        if self.strict:
            return super().score(example, completion)
        return float(str(example["answer"]) in completion)


register_task("toy_sum", ToySum)
