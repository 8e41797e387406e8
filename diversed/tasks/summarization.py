"""What CNN/DailyMail and XSum share: ROUGE-1/2/L F-measure of a summary against the reference.

Scores come from Google's `rouge-score` package (what `evaluate.load("rouge")` wraps, without
fetching anything from the Hub). `metrics()` computes ROUGE-1, ROUGE-2 and ROUGE-L F (`rougeL`,
longest common subsequence over the whole text, not the per-sentence `rougeLsum`) in one scorer
call; ROUGE-2 F is the headline `score()`, taken from it. Two options (`options`): `use_stemmer`
(off by default, as in `evaluate.load("rouge")`) and `max_summary_words`. The summary is the
completion cut at the stop sequences, stripped, and, when `max_summary_words` is set, cut to that
many words. Nothing else is normalised: rouge-score itself lower-cases and drops punctuation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, ClassVar

from annotated_types import Ge

from diversed.tasks.base import Option, Task


class SummarizationTask(Task):
    metric: ClassVar[str] = "rouge2"
    rouge_types: ClassVar[tuple[str, ...]] = ("rouge1", "rouge2", "rougeL")
    document_field: ClassVar[str] = "document"
    summary_field: ClassVar[str] = "summary"
    options = {
        "use_stemmer": Option(
            False, bool, "rouge-score's Porter stemmer; false matches evaluate.load('rouge')"
        ),
        # the dataset's cut is this option's default (XSum redeclares it)
        "max_summary_words": Option(
            None,
            Annotated[int, Ge(0)] | None,
            "words of the summary scored; 0: all of them; null: the task's default",
        ),
    }
    use_stemmer: bool
    max_summary_words: int | None  # None: the whole summary

    @property
    def cut_field(self) -> str:  # type: ignore[override]
        """A prompt too long loses the end of its document (`Task.cut_field`)."""
        return self.document_field

    def __init__(self, examples: Sequence[dict[str, Any]], **kwargs: Any) -> None:
        """`max_summary_words`: None keeps the task's default, 0 turns the cut off."""
        super().__init__(examples, **kwargs)
        from rouge_score import rouge_scorer  # imports nltk: only pay for it when summarising

        if self.max_summary_words is None:
            self.max_summary_words = self.options["max_summary_words"].default
        self.max_summary_words = self.max_summary_words or None
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
