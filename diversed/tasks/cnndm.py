"""CNN/DailyMail (abisee/cnn_dailymail, config `3.0.0`): news articles summarised, scored by ROUGE-2.

A row::

    {"id": "dm-test-8764fb95...", "article": "Paul Merson has restarted his row with Andros Townsend
     after the Tottenham midfielder was brought on with only seven minutes remaining ...",
     "highlights": "Andros Townsend an 83rd minute sub in Tottenham's draw with Burnley.\\nHe was
     unable to find a winner as the game ended without a goal.\\n..."}

The prompt is the paper's zero-shot format; the reference is `highlights`. The whole summary is
scored (no word cut unless `max_summary_words` is set); see `summarization.py` for the metric.
"""

from __future__ import annotations

from typing import Any, ClassVar

from diversed.tasks.summarization import SummarizationTask


class CNNDailyMail(SummarizationTask):
    name: ClassVar[str] = "cnndm"
    # A blank line ends the summary; "\nArticle:" is the model starting another example.
    stop = ("\n\n", "\nArticle:")
    max_new_tokens = 128

    dataset: ClassVar[str] = "abisee/cnn_dailymail"
    dataset_config: ClassVar[str | None] = "3.0.0"
    hub_splits: ClassVar[tuple[str, ...]] = ("train", "validation", "test")
    fields: ClassVar[tuple[str, ...]] = ("article", "highlights", "id")
    required_fields: ClassVar[tuple[str, ...] | None] = ("article", "highlights")  # the id is optional
    document_field: ClassVar[str] = "article"
    summary_field: ClassVar[str] = "highlights"

    def prompt(self, example: dict[str, Any]) -> str:
        return f"Summarize the following article:\n\nArticle: {example['article']}\n\nSummary:"
