"""XSum (EdinburghNLP/xsum): BBC articles summarised in one sentence, scored by ROUGE-2.

A row::

    {"id": "34268361", "document": "The owners said their planned £80m development at the site in
     Bewdley, Worcestershire, would create between 300 and 500 jobs. ...",
     "summary": "Plans for a £80m water park and hotel in Worcestershire have been approved."}

The Hub repository's main branch holds a loading script, which `datasets` >= 4 refuses to run,
so rows come from its parquet conversion (revision `refs/convert/parquet`; `revision=` overrides).
The prompt is the paper's zero-shot format; as in the paper, the summary is cut to its first
32 words before scoring (`max_summary_words`). See `summarization.py` for the metric.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

from diversed.tasks.summarization import SummarizationTask


class XSum(SummarizationTask):
    name: ClassVar[str] = "xsum"
    # A blank line ends the summary; "\nDocument:" is the model starting another example.
    stop = ("\n\n", "\nDocument:")
    max_new_tokens = 64
    options = {
        "max_summary_words": replace(SummarizationTask.options["max_summary_words"], default=32)
    }  # the paper's cut

    dataset: ClassVar[str] = "EdinburghNLP/xsum"
    dataset_config: ClassVar[str | None] = None  # the conversion's only config
    revision: ClassVar[str | None] = "refs/convert/parquet"
    hub_splits: ClassVar[tuple[str, ...]] = ("train", "validation", "test")
    fields: ClassVar[tuple[str, ...]] = ("document", "summary", "id")
    required_fields: ClassVar[tuple[str, ...] | None] = ("document", "summary")  # the id is optional

    def prompt(self, example: dict[str, Any]) -> str:
        return (
            "Write a concise summary of the following document:\n\n"
            f"Document: {example['document']}\n\nSummary:"
        )
