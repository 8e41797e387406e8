"""What CNN/DailyMail and XSum share: ROUGE-1/2/L F-measure of a summary against the reference.

Scores come from Google's `rouge-score` package (what `evaluate.load("rouge")` wraps, without
fetching anything from the Hub). ROUGE-2 F is the headline `score()`; `metrics()` adds ROUGE-1 and
ROUGE-L (`rougeL`, longest common subsequence over the whole text, not the per-sentence `rougeLsum`).
Stemming is off by default, as in `evaluate.load("rouge")`; `use_stemmer` is recorded in
`settings()`. The summary is the completion cut at the stop sequences, stripped, and, when
`max_summary_words` is set, cut to that many words. Nothing else is normalised: rouge-score itself
lower-cases and drops punctuation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from diversed.tasks.base import Task


class SummarizationTask(Task):
    metric: ClassVar[str] = "rouge2"
    rouge_types: ClassVar[tuple[str, ...]] = ("rouge1", "rouge2", "rougeL")
    document_field: ClassVar[str] = "document"
    summary_field: ClassVar[str] = "summary"
    max_summary_words: int | None = None  # the dataset's default cut; None keeps the whole summary

    def __init__(
        self,
        examples: Sequence[dict[str, Any]],
        *,
        use_stemmer: bool = False,
        max_summary_words: int | None = None,
        **kwargs: Any,
    ) -> None:
        """`max_summary_words`: None keeps the class default, 0 turns the cut off."""
        super().__init__(examples, **kwargs)
        from rouge_score import rouge_scorer  # imports nltk: only pay for it when summarising

        self.use_stemmer = bool(use_stemmer)
        if max_summary_words is not None:
            self.max_summary_words = int(max_summary_words) or None
        self.scorer = rouge_scorer.RougeScorer(list(self.rouge_types), use_stemmer=self.use_stemmer)

    def target(self, example: dict[str, Any]) -> str:
        return example[self.summary_field]

    def summary(self, completion: str) -> str:
        """The part of a completion that is scored."""
        text = self.truncate(completion).strip()
        if self.max_summary_words:
            text = " ".join(text.split()[: self.max_summary_words])
        return text

    def extract(self, example: dict[str, Any], completion: str) -> str:
        return self.summary(completion)

    def metrics(self, example: dict[str, Any], completion: str) -> dict[str, float]:
        scores = self.scorer.score(self.target(example), self.summary(completion))
        return {name: scores[name].fmeasure for name in self.rouge_types}

    def score(self, example: dict[str, Any], completion: str) -> float:
        return self.metrics(example, completion)[self.metric]

    def settings(self) -> dict[str, Any]:
        return {
            **super().settings(),
            "use_stemmer": self.use_stemmer,
            "max_summary_words": self.max_summary_words,
        }
