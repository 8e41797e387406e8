"""MBPP (google-research-datasets/mbpp): short Python problems, scored by pass@1 of their tests.

A row of the `full` config (974 problems; the `sanitized` one has 427, with `prompt` for `text`
and `test_imports` for `test_setup_code`; both schemas are read as they are)::

    {"task_id": 2, "text": "Write a function to find the shared elements from the given two lists.",
     "code": "def similar_elements(test_tup1, test_tup2): ...",
     "test_list": ["assert set(similar_elements((3, 4, 5, 6),(5, 7, 4, 10))) == set((4, 5))", ...],
     "test_setup_code": "", "challenge_test_list": []}

The prompt is the paper's zero-shot format, the tests one per line (option `test_format="lines"`) or
printed as a Python list (`"list"`, what the released evaluation script's prompt shows). The completion is the
program: cut at the stop sequences, then, if it holds a markdown ``` fence, the first fenced
block (the completion ends once that block is closed: an instruct model's explanation after it is
not generated). It passes when every test (an `assert` line, as given) holds after `program +
test_setup_code` in the sandbox of `diversed/tasks/execution.py`: the tests' calls of the program run
after it, in its process, and a separate judge that never ran it compares their values
(`checks.py`), so a program cannot pass by faking a result. The sandbox needs an explicit opt-in
(`allow_code_execution=True` or DIVERSED_ALLOW_CODE_EXECUTION=1), checked when the task is built.
`challenge_test_list` is not used.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated, Any, ClassVar, Literal

from annotated_types import Ge, Gt

from diversed.tasks import checks, execution
from diversed.tasks.base import Option, Task

# The first fenced block: an opening ``` with an optional language tag, up to the closing fence
# or the end of the text (generation may stop before the fence closes).
TEST_FORMATS = ("lines", "list")  # how the prompt shows the tests: one per line, or a Python list
_FENCE = re.compile(r"```[^\n`]*\n(.*?)(?:```|\Z)", re.DOTALL)
_CLOSED_FENCE = re.compile(r"```[^\n`]*\n.*?```", re.DOTALL)  # the first fenced block, closed


def extract_code(completion: str) -> str:
    """The program in a completion: its first fenced block if it has one, else all of it."""
    m = _FENCE.search(completion)
    return m.group(1) if m else completion


def _text(example: dict[str, Any]) -> str:
    return example["text"] if "text" in example else example["prompt"]


def _setup(example: dict[str, Any]) -> str:
    if example.get("test_setup_code"):
        return example["test_setup_code"]
    return "\n".join(example.get("test_imports") or [])


class MBPP(Task):
    name: ClassVar[str] = "mbpp"
    metric: ClassVar[str] = "pass@1"
    # Top-level test code, a script guard or a new problem mean the solution is over.
    stop = ("\nassert", "\nif __name__", "\nWrite a Python function", "\n# Test")
    max_new_tokens = 256

    dataset: ClassVar[str] = "google-research-datasets/mbpp"
    dataset_config: ClassVar[str | None] = "full"
    hub_splits: ClassVar[tuple[str, ...]] = (
        "train",
        "validation",
        "test",
        "prompt",
    )  # full and sanitized alike
    fields: ClassVar[tuple[str, ...]] = ("task_id", "text", "code", "test_list", "test_setup_code")
    target_delimiter: ClassVar[str] = "\n"  # few-shot solutions start on their own line
    options = {
        "subset": Option(
            "full", Literal["full", "sanitized"], "the Hub config: full (974 problems) or sanitized (427)"
        ),
        "test_format": Option(
            "lines", Literal[TEST_FORMATS], "the prompt's tests: one per line, or a Python list"
        ),
        "timeout": Option(execution.DEFAULT_TIMEOUT_S, Annotated[float, Gt(0)], "seconds per program"),
        "allow_code_execution": Option(
            False,
            bool,
            "scoring runs model-generated code: true (or DIVERSED_ALLOW_CODE_EXECUTION=1) to allow it",
            recorded=False,
        ),
        "workers": Option(
            None, Annotated[int, Ge(1)] | None, "programs run at once; null: one per CPU", recorded=False
        ),
    }
    subset: str
    test_format: str
    timeout: float
    allow_code_execution: bool
    workers: int | None

    def __init__(self, examples: Sequence[dict[str, Any]], **kwargs: Any) -> None:
        execution.require_code_execution(kwargs.get("allow_code_execution", False), "The mbpp task")
        for i, example in enumerate(examples):  # before any decoding: a test the judge cannot check
            where = f"MBPP problem {example.get('task_id', f'at row {i}')}: test"
            checks.validate([t.replace("\r\n", "\n") for t in example.get("test_list") or ()], where)
        super().__init__(examples, **kwargs)
        self.allow_code_execution = True  # (or the environment's opt-in)

    @classmethod
    def load(cls, *, subset: str = "full", allow_code_execution: bool = False, **kwargs: Any) -> MBPP:
        """`subset`: the Hub config, "full" or "sanitized". The opt-in is checked before any loading."""
        execution.require_code_execution(allow_code_execution, "The mbpp task")
        return super().load(hub_config=subset, subset=subset, allow_code_execution=True, **kwargs)

    @classmethod
    def missing_fields(cls, row: dict[str, Any]) -> list[str]:
        """Either schema: full (text, test_list, ...) or sanitized (prompt, test_list, ...)."""
        return [f for f in ("test_list",) if f not in row] + (
            [] if "text" in row or "prompt" in row else ["text"]
        )

    @classmethod
    def needed_fields(cls) -> str:
        return "text (or prompt, as in the sanitized set), test_list; code for few-shot examples"

    def prompt(self, example: dict[str, Any]) -> str:
        tests = (
            "\n".join(example["test_list"])
            if self.test_format == "lines"
            else str(list(example["test_list"]))
        )
        return (
            f"Write a Python function to solve the following problem:\n\n{_text(example)}\n\n"
            f"Your solution should pass these tests:\n{tests}"
        )

    def target(self, example: dict[str, Any]) -> str:
        return example["code"].replace("\r\n", "\n")

    def reference(self, example: dict[str, Any]) -> str:
        return "\n".join(example["test_list"])  # what the program must pass

    def truncate(self, completion: str) -> str:
        """Cut at the stop sequences, then after the first fenced block once it is closed: what is
        scored is that block (`extract_code`), so an instruct model's explanation after its code is
        not waited for (with `stop_early`, the row ends there) and changes no score."""
        text = super().truncate(completion)
        m = _CLOSED_FENCE.search(text)
        return text[: m.end()] if m else text

    def extract(self, example: dict[str, Any], completion: str) -> str:
        return extract_code(self.truncate(completion))

    def program(self, example: dict[str, Any], completion: str) -> str:
        """What runs, as one text: the extracted code, the setup code, then the tests (for reading;
        `execute` runs the tests' parts after the code and setup, and judges them apart)."""
        return "\n".join([self._code(example, completion), *self._tests(example)]) + "\n"

    def _code(self, example: dict[str, Any], completion: str) -> str:
        return "\n".join(self._parts(example, completion))

    def _parts(self, example: dict[str, Any], completion: str) -> tuple[str, str]:
        """(the extracted code, the setup code): the setup's imports are the tests' own (`checks.plan`)."""
        code = extract_code(self.truncate(completion))
        return code.replace("\r\n", "\n"), _setup(example).replace("\r\n", "\n")

    def _tests(self, example: dict[str, Any]) -> list[str]:
        return [t.replace("\r\n", "\n") for t in example["test_list"]]

    def execute(
        self, examples: Sequence[dict[str, Any]], completions: Sequence[str]
    ) -> list[execution.ExecutionResult]:
        """Run the programs in parallel, each test judged apart from the program
        (`diversed/tasks/checks.py`); each result has the output and the verdict per test."""
        jobs = []
        for example, completion in zip(examples, completions, strict=True):
            code, setup = self._parts(example, completion)
            jobs.append(("\n".join((code, setup)), checks.plan(code, setup, self._tests(example))))
        return execution.run_programs(jobs, workers=self.workers, timeout=self.timeout)

    def score(self, example: dict[str, Any], completion: str) -> float:
        return self.score_batch([example], [completion])[0]

    def score_batch(self, examples: Sequence[dict[str, Any]], completions: Sequence[str]) -> list[float]:
        return [float(r.passed) for r in self.execute(examples, completions)]
