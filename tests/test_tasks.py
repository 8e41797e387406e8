"""The four paper tasks on tiny fixture rows written in each dataset's own schema: loading
(JSONL, JSON, parquet), subsets, prompts, stop sequences, answer extraction, metrics, configs.
Nothing is downloaded; MBPP's programs run in the sandbox (see test_execution.py)."""

from __future__ import annotations

import json
import time
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf
from rouge_score import rouge_scorer

from diversed.errors import ConfigError
from diversed.models import hub
from diversed.tasks import TASKS, load_task
from diversed.tasks.cnndm import CNNDailyMail
from diversed.tasks.data import DatasetUnavailable, subset, subset_indices
from diversed.tasks.gsm8k import GSM8K, extract_answer
from diversed.tasks.mbpp import MBPP, extract_code
from diversed.tasks.xsum import XSum

CONFIGS = Path(__file__).resolve().parents[1] / "diversed" / "configs" / "task"

GSM8K_ROWS = [
    {
        "question": f"Tom has {i} apples and buys {i + 1} more. How many apples does he have?",
        "answer": f"He has {i} + {i + 1} = <<{i}+{i + 1}={2 * i + 1}>>{2 * i + 1} apples.\n#### {2 * i + 1}",
    }
    for i in range(20)
]
GSM8K_TRAIN = [
    {"question": f"What is {i} times 1,000?", "answer": f"{i} * 1000 = {i * 1000}\n#### {i * 1000:,}"}
    for i in range(1, 6)
]
CNNDM_ROWS = [
    {
        "id": "cnn-1",
        "article": "The council approved the new bridge on Monday . Work starts in May . It will cost $ 2m .",
        "highlights": "Council approves new bridge .\nWork starts in May .",
    },
    {"id": "dm-2", "article": "A cat was rescued from a tree .", "highlights": "Cat rescued from tree ."},
]
XSUM_ROWS = [
    {
        "id": "34268361",
        "document": (
            "The owners said their planned development would create 300 jobs.\nThe park opens in 2017."
        ),
        "summary": "Plans for a water park and hotel in Worcestershire have been approved.",
    }
]
MBPP_FULL_ROWS = [
    {
        "task_id": 11,
        "text": "Write a python function to add two numbers.",
        "code": "def add(a, b):\r\n    return a + b",
        "test_list": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"],
        "test_setup_code": "",
        "challenge_test_list": [],
    },
    {
        "task_id": 12,
        "text": "Write a function to scale a number by the global factor.",
        "code": "def scale(x):\r\n    return x * FACTOR",
        "test_list": ["assert scale(2) == 6"],
        "test_setup_code": "FACTOR = 3",
        "challenge_test_list": [],
    },
]
MBPP_SANITIZED_ROWS = [
    {
        "source_file": "Benchmark Questions Verification V2.ipynb",
        "task_id": 82,
        "prompt": "Write a function to find the volume of a sphere.",
        "code": "import math\ndef volume_sphere(r):\n  return (4/3)*math.pi*r*r*r",
        "test_imports": ["import math"],
        "test_list": ["assert math.isclose(volume_sphere(10), 4188.790204786391, rel_tol=0.001)"],
    }
]


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _parquet(path: Path, rows: list[dict]) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    return {
        "gsm8k": _jsonl(tmp_path / "gsm8k_test.jsonl", GSM8K_ROWS),
        "gsm8k_train": _parquet(tmp_path / "gsm8k_train.parquet", GSM8K_TRAIN),
        "cnndm": _parquet(tmp_path / "cnndm_test.parquet", CNNDM_ROWS),
        "xsum": _jsonl(tmp_path / "xsum_test.jsonl", XSUM_ROWS),
        "mbpp": _jsonl(tmp_path / "mbpp.jsonl", MBPP_FULL_ROWS),
        "mbpp_sanitized": tmp_path / "sanitized.json",
    }


@pytest.fixture(autouse=True)
def _sanitized_json(files: dict[str, Path]) -> None:
    files["mbpp_sanitized"].write_text(json.dumps(MBPP_SANITIZED_ROWS, indent=1))  # a JSON list, as released


def tiny_tokenizer(texts: list[str]):
    """A word-level tokenizer over the words of `texts`, with a chat template; nothing downloaded."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = sorted({w for t in texts for w in t.split()} | {"<user>", "</user>", "<assistant>"})
    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(words)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")
    hf.chat_template = (
        "{% for m in messages %}<user> {{ m['content'] }} </user>{% endfor %}"
        "{% if add_generation_prompt %} <assistant>{% endif %}"
    )
    return hf


# ---------------------------------------------------------------- registry, loading, subsets


def test_registry_and_configs(files: dict[str, Path]) -> None:
    assert {"gsm8k", "cnndm", "xsum", "mbpp"} <= set(TASKS)
    with pytest.raises(ValueError, match="unknown task"):
        load_task("nope")
    expected = {"gsm8k": (GSM8K, 256), "cnndm": (CNNDailyMail, 128), "xsum": (XSum, 64), "mbpp": (MBPP, 256)}
    for name, (cls, max_new_tokens) in expected.items():
        cfg = OmegaConf.load(CONFIGS / f"{name}.yaml")
        assert cfg._target_ == "diversed.tasks.load_task" and cfg.name == name and cfg.split == "test"
        assert cfg.n_examples is None and cfg.data_files is None
        cfg.data_files = str(files[name])
        if name == "mbpp":
            cfg.allow_code_execution = True
        task = instantiate(cfg)
        assert type(task) is cls and len(task) > 0 and task.max_new_tokens == max_new_tokens
        assert task.settings()["task"] == name
    xsum = instantiate(
        OmegaConf.merge(OmegaConf.load(CONFIGS / "xsum.yaml"), {"data_files": str(files["xsum"])})
    )
    assert xsum.settings()["max_summary_words"] == 32 and xsum.settings()["use_stemmer"] is False
    cnndm = instantiate(
        OmegaConf.merge(OmegaConf.load(CONFIGS / "cnndm.yaml"), {"data_files": str(files["cnndm"])})
    )
    assert cnndm.max_summary_words is None


def test_local_files_in_each_format(files: dict[str, Path], tmp_path: Path) -> None:
    as_jsonl = load_task("gsm8k", data_files=str(files["gsm8k"]))
    as_parquet = load_task("gsm8k", data_files=_parquet(tmp_path / "g.parquet", GSM8K_ROWS))
    as_list = load_task("gsm8k", data_files=[str(files["gsm8k"]), str(files["gsm8k"])])
    assert as_jsonl.examples == as_parquet.examples == GSM8K_ROWS
    assert as_list.examples == GSM8K_ROWS + GSM8K_ROWS
    by_split = load_task(
        "gsm8k", split="train", data_files={"test": files["gsm8k"], "train": files["gsm8k_train"]}
    )
    assert by_split.examples == GSM8K_TRAIN
    with pytest.raises(KeyError, match="validation"):
        load_task("gsm8k", split="validation", data_files={"test": files["gsm8k"]})
    assert load_task("cnndm", data_files=files["cnndm"]).examples == CNNDM_ROWS
    assert as_jsonl.settings()["data_files"] == str(files["gsm8k"])


def test_n_examples_is_a_seed_stable_subset(files: dict[str, Path]) -> None:
    def ids(n: int | None, seed: int = 0) -> list[str]:
        task = load_task("gsm8k", data_files=files["gsm8k"], n_examples=n, seed=seed)
        return [e["question"] for e in task]

    five = ids(5)
    assert len(five) == 5 and five == ids(5)  # same seed, same rows
    assert five != ids(5, seed=1)
    assert set(five) < set(ids(8))  # a larger n only adds rows
    order = [r["question"] for r in GSM8K_ROWS]
    assert five == sorted(five, key=order.index)  # dataset order is kept
    assert ids(None) == ids(1000) == order
    assert subset(list(range(10)), 3, seed=7) == subset(list(range(10)), 3, seed=7)


def test_skip_examples_draws_fresh_rows_disjoint_from_the_first(files: dict[str, Path]) -> None:
    """skip_examples = k, n_examples = m: the rows n = k + m adds to n = k (none of n = k's), recorded
    in the task's source; 0 leaves the settings as they were (earlier records' keys stand)."""
    rows = [r["question"] for r in GSM8K_ROWS]

    def load(**kw):
        return load_task("gsm8k", data_files=files["gsm8k"], seed=3, **kw)

    first, fresh, both = load(n_examples=3), load(n_examples=4, skip_examples=3), load(n_examples=7)
    q = lambda task: [e["question"] for e in task]  # noqa: E731
    assert len(fresh) == 4 and not set(q(first)) & set(q(fresh))
    assert set(q(first)) | set(q(fresh)) == set(q(both))
    assert q(fresh) == sorted(q(fresh), key=rows.index)  # dataset order, as without a skip
    assert [fresh.indices[i] for i in range(4)] == [rows.index(x) for x in q(fresh)]
    assert fresh.settings()["skip_examples"] == 3
    assert "skip_examples" not in first.settings()
    assert load(n_examples=3, skip_examples=0).settings() == first.settings()
    rest = load(skip_examples=3)  # n None: every row the first three leave
    assert sorted(q(rest) + q(first)) == sorted(rows)
    assert subset_indices(10, 3, 7, skip=2) == sorted(subset_indices(10, 5, 7, keep_order=False)[2:])
    with pytest.raises(ValueError, match="skip_examples=10 leaves none of the split's 10 rows"):
        subset_indices(10, 3, 7, skip=10)
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="skip_examples must be an integer >= 0"):
            subset_indices(10, 3, 7, skip=bad)


def test_skip_examples_on_the_toy_task_and_on_a_task_whose_load_predates_it() -> None:
    from diversed.tasks.toy import ToyTask

    first, fresh = ToyTask.load(n_examples=4), ToyTask.load(n_examples=3, skip_examples=4)
    assert fresh.examples == ToyTask.load(n_examples=7).examples[4:]
    assert fresh.indices == [4, 5, 6] and fresh.settings()["skip_examples"] == 4
    assert "skip_examples" not in first.settings()

    class Old(ToyTask):  # a plugin's own load, written before skip_examples existed
        name = "toy_old_load"

        @classmethod
        def load(cls, *, split=None, data_files=None, n_examples=None, seed=0):
            return super().load(split=split, n_examples=n_examples, seed=seed)

    class Dropping(ToyTask):  # one that takes **options and drops them
        name = "toy_dropping_load"

        @classmethod
        def load(cls, *, split=None, n_examples=None, **options):
            return super().load(split=split, n_examples=n_examples)

    class Passing(ToyTask):  # one that passes **options on (as MBPP's does): it takes the skip
        name = "toy_passing_load"

        @classmethod
        def load(cls, **options):
            return super().load(**options)

    TASKS.update({c.name: c for c in (Old, Dropping, Passing)})
    try:
        for name in ("toy_old_load", "toy_dropping_load"):
            assert len(load_task(name, n_examples=2, skip_examples=0)) == 2  # the default: loads
            with pytest.raises(
                ConfigError, match="has a `load` of its own that does not apply skip_examples"
            ):
                load_task(name, n_examples=2, skip_examples=2)
        assert load_task("toy_passing_load", n_examples=3, skip_examples=4).examples == fresh.examples
    finally:
        for c in (Old, Dropping, Passing):
            del TASKS[c.name]


def test_mbpp_takes_skip_examples_and_a_skip_past_the_split_is_a_config_error(files: dict[str, Path]) -> None:
    def load(**kw):
        return load_task("mbpp", data_files=files["mbpp"], allow_code_execution=True, seed=1, **kw)

    first, fresh = load(n_examples=1), load(n_examples=1, skip_examples=1)
    assert fresh.settings()["skip_examples"] == 1 and not set(first.indices) & set(fresh.indices)
    assert set(first.indices) | set(fresh.indices) == set(load(n_examples=2).indices)
    size = len(load())
    with pytest.raises(ConfigError, match=f"skip_examples={size} leaves none of the split's {size} rows"):
        load(n_examples=1, skip_examples=size)


def test_offline_error_is_fast_and_names_the_config_key(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    start = time.monotonic()
    with pytest.raises(DatasetUnavailable) as err:
        load_task("gsm8k")
    assert time.monotonic() - start < 5
    message = str(err.value)
    assert "openai/gsm8k" in message and "task.data_files" in message and "question, answer" in message

    # With the offline variables set it fails (or reads the local cache) without touching the network;
    # a dataset no cache holds makes the outcome certain.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(XSum, "dataset", "diversed-tests/no-such-dataset")
    start = time.monotonic()
    with pytest.raises(DatasetUnavailable, match=r"diversed-tests/no-such-dataset.*task\.data_files"):
        load_task("xsum")
    assert time.monotonic() - start < 10  # includes importing `datasets` the first time


def test_hub_probe_has_a_short_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = {}

    def fake_connect(address: tuple[str, int], timeout: float):
        seen.update(address=address, timeout=timeout)
        raise TimeoutError

    monkeypatch.setattr(hub.socket, "create_connection", fake_connect)
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    assert hub.probe() is not None  # unreachable
    assert seen == {"address": ("huggingface.co", 443), "timeout": 3.0}


def test_few_shot_examples_come_from_the_train_split(files: dict[str, Path]) -> None:
    splits = {"test": str(files["gsm8k"]), "train": str(files["gsm8k_train"])}
    task = load_task("gsm8k", data_files=splits, n_examples=2, num_few_shot=2, seed=3)
    again = load_task("gsm8k", data_files=splits, n_examples=5, num_few_shot=2, seed=3)
    assert task.few_shot == again.few_shot and len(task.few_shot) == 2
    assert all(s in GSM8K_TRAIN for s in task.few_shot)
    shots = "".join(f"Question: {s['question']}\n\nAnswer: {s['answer']}\n\n" for s in task.few_shot)
    assert task.full_prompt(task[0]) == shots + f"Question: {task[0]['question']}\n\nAnswer:"
    assert task.settings()["num_few_shot"] == 2
    with pytest.raises(ValueError, match="task.data_files="):
        load_task("gsm8k", data_files=str(files["gsm8k"]), num_few_shot=2)


# ---------------------------------------------------------------- prompts and tokenisation


def test_exact_zero_shot_prompts(files: dict[str, Path]) -> None:
    gsm8k = load_task("gsm8k", data_files=files["gsm8k"])
    assert gsm8k.full_prompt(gsm8k[3]) == (
        "Question: Tom has 3 apples and buys 4 more. How many apples does he have?\n\nAnswer:"
    )
    cnndm = load_task("cnndm", data_files=files["cnndm"])
    assert cnndm.full_prompt(cnndm[1]) == (
        "Summarize the following article:\n\nArticle: A cat was rescued from a tree .\n\nSummary:"
    )
    xsum = load_task("xsum", data_files=files["xsum"])
    assert xsum.full_prompt(xsum[0]) == (
        "Write a concise summary of the following document:\n\nDocument: The owners said their planned "
        "development would create 300 jobs.\nThe park opens in 2017.\n\nSummary:"
    )
    mbpp = load_task("mbpp", data_files=files["mbpp"], allow_code_execution=True)
    assert mbpp.full_prompt(mbpp[0]) == (
        "Write a Python function to solve the following problem:\n\nWrite a python function to add two "
        "numbers.\n\nYour solution should pass these tests:\nassert add(1, 2) == 3\nassert add(-1, 1) == 0"
    )
    # the released script's format: the test list printed as a Python list
    listed = load_task("mbpp", data_files=files["mbpp"], allow_code_execution=True, test_format="list")
    assert listed.full_prompt(listed[0]).endswith(
        "Your solution should pass these tests:\n['assert add(1, 2) == 3', 'assert add(-1, 1) == 0']"
    )
    assert listed.settings()["test_format"] == "list" and mbpp.settings()["test_format"] == "lines"
    with pytest.raises(ValueError, match="test_format"):
        load_task("mbpp", data_files=files["mbpp"], allow_code_execution=True, test_format="json")
    sanitized = load_task(
        "mbpp", data_files=files["mbpp_sanitized"], subset="sanitized", allow_code_execution=True
    )
    assert sanitized.full_prompt(sanitized[0]).startswith(
        "Write a Python function to solve the following problem:\n\n"
        "Write a function to find the volume of a sphere."
    )
    assert [mbpp.example_id(e, i) for i, e in enumerate(mbpp)] == ["11", "12"]
    assert cnndm.example_id(cnndm[0], 0) == "cnn-1"


def test_a_long_prompt_loses_the_end_of_its_document(files: dict[str, Path]) -> None:
    """The instruction, the document's start and the answer cue stay; the document's end goes."""
    task = load_task("cnndm", data_files=files["cnndm"], chat_template=False, max_prompt_tokens=12)
    prompt = task.full_prompt(task[0])
    tok = tiny_tokenizer([prompt])
    (ids,), (cut,) = task.encode_cut(tok, [task[0]])
    assert len(ids) <= 12 and cut == len(tok(prompt)["input_ids"]) - len(ids) > 0
    assert (
        tok.decode(ids)
        == "Summarize the following article: Article: The council approved the new bridge Summary:"
    )

    chat = load_task("cnndm", data_files=files["cnndm"], chat_template=True, max_prompt_tokens=14)
    assert tok.decode(chat.encode(tok, [chat[0]])[0]) == (
        "<user> Summarize the following article: Article: The council approved the new Summary: "
        "</user> <assistant>"
    )
    whole = load_task("cnndm", data_files=files["cnndm"], chat_template=True)
    assert tok.decode(whole.encode(tok, [whole[0]])[0]).startswith("<user> Summarize the following article:")


def test_a_prompt_with_no_document_to_shorten_keeps_its_end(files: dict[str, Path]) -> None:
    # the instruction alone is longer than the limit: nothing of the document can make room
    task = load_task("cnndm", data_files=files["cnndm"], chat_template=False, max_prompt_tokens=4)
    prompt = task.full_prompt(task[0])
    tok = tiny_tokenizer([prompt])
    assert tok.decode(task.encode(tok, [task[0]])[0]) == " ".join(prompt.split()[-4:]) == "$ 2m . Summary:"
    gsm = load_task("gsm8k", data_files=files["gsm8k"], chat_template=False, max_prompt_tokens=3)
    p = gsm.full_prompt(gsm[0])
    tok = tiny_tokenizer([p])
    assert tok.decode(gsm.encode(tok, [gsm[0]])[0]) == " ".join(p.split()[-3:])


def test_chat_template_auto_follows_the_tokenizer_and_is_recorded(files: dict[str, Path]) -> None:
    task = load_task("cnndm", data_files=files["cnndm"])
    assert task.chat_template == "auto" and task.settings()["chat_template"] == "auto"
    prompt = task.full_prompt(task[0])
    tok = tiny_tokenizer([prompt])
    assert tok.decode(task.encode(tok, [task[0]])[0]).startswith("<user> Summarize")
    assert task.settings()["chat_template"] is True  # settled by the tokenizer, recorded
    plain = load_task("cnndm", data_files=files["cnndm"])
    tok.chat_template = None  # a base model's tokenizer: no template, the raw prompt
    assert plain.resolve_chat_template(tok) is False and plain.settings()["chat_template"] is False
    assert plain.encode(tok, [plain[0]])[0] == tok(prompt)["input_ids"]
    with pytest.raises(ConfigError, match="chat_template"):
        load_task("cnndm", data_files=files["cnndm"], chat_template="yes")


# ---------------------------------------------------------------- GSM8K


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs.\n#### 18", "18"),
        ("#### 1,000", "1000"),
        ("The total is $1,000.", "1000"),
        ("She pays $1,000,000 in total", "1000000"),
        ("The temperature drops to -5 degrees.", "-5"),
        ("So the answer is $-5.", "-5"),
        ("It takes 3.0 hours", "3.0"),
        ("First 12, then 3, 4 and finally 5", "5"),  # commas between numbers do not join them
        ("#### 7 apples, not 9", "7"),  # after ####, the first number wins over the last one
        ("16-3-4=9", "9"),
        ("no number here", None),
    ],
)
def test_gsm8k_answer_extraction(text: str, expected: str | None) -> None:
    assert extract_answer(text) == (None if expected is None else Decimal(expected))


def test_gsm8k_scores_and_stop_sequences(files: dict[str, Path]) -> None:
    task = load_task("gsm8k", data_files=files["gsm8k"])
    ex = task[4]  # answer 9
    assert task.score(ex, ex["answer"]) == 1.0
    assert task.score(ex, " 4 + 5 = 9 apples.\n#### 9") == 1.0
    assert task.score(ex, " He has 9.0 apples") == 1.0
    assert task.score(ex, " He has $9") == 1.0
    assert task.score(ex, " He has 8 apples") == 0.0
    assert task.score(ex, "") == 0.0
    rambling = " 4 + 5 = 9\n#### 9\n\nQuestion: What is 2 + 2?\n\nAnswer: 4\n#### 4"
    assert task.truncate(rambling) == " 4 + 5 = 9\n#### 9"
    assert task.score(ex, rambling) == 1.0
    assert task.score(ex, " The answer is 9.\nQuestion: and 10?") == 1.0  # "Question:" alone also stops
    assert task.reward(ex, rambling) == task.score(ex, rambling)
    assert (
        task.score_batch([ex, ex], ["#### 9", "#### 8"])
        == [1.0, 0.0]
        == task.reward_batch([ex, ex], ["#### 9", "#### 8"])
    )
    assert task.metrics(ex, "#### 9") == {"accuracy": 1.0}
    comma = {"question": "?", "answer": "so 1000 * 2 = 2000\n#### 2,000"}
    assert task.score(comma, "It is 2,000 dollars.") == 1.0 and task.score(comma, "#### 2000.00") == 1.0


# ---------------------------------------------------------------- summarisation


def test_rouge_equals_rouge_score(files: dict[str, Path]) -> None:
    task = load_task("cnndm", data_files=files["cnndm"])
    ex = task[0]
    completion = " The council approved a new bridge . Work starts in May .\n\nArticle: something else"
    prediction = "The council approved a new bridge . Work starts in May ."
    reference = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=False).score(
        ex["highlights"], prediction
    )
    metrics = task.metrics(ex, completion)
    assert metrics == {k: reference[k].fmeasure for k in ("rouge1", "rouge2", "rougeL")}
    assert task.score(ex, completion) == metrics["rouge2"] == task.reward(ex, completion)
    assert 0 < metrics["rouge2"] < 1
    assert task.score(ex, "\n\nleading blank line, nothing else") == 0.0  # cut at the first stop
    assert task.score(ex, ex["highlights"]) == 1.0


def test_use_stemmer_is_a_recorded_choice(files: dict[str, Path]) -> None:
    plain = load_task("cnndm", data_files=files["cnndm"])
    stemmed = load_task("cnndm", data_files=files["cnndm"], use_stemmer=True)
    ex = {"id": "x", "article": "", "highlights": "The cats are running home"}
    assert stemmed.score(ex, "the cat runs home") > plain.score(ex, "the cat runs home")
    assert stemmed.settings()["use_stemmer"] is True and plain.settings()["use_stemmer"] is False


def test_a_summary_is_scored_once_for_all_its_metrics(files: dict[str, Path]) -> None:
    """evaluate scores through `checked_metrics`: one ROUGE call per completion gives the headline
    score and ROUGE-1/L (they were computed twice: once for the score, once for the metrics)."""
    task = load_task("xsum", data_files=files["xsum"])
    calls, real = [], task.scorer.score
    task.scorer.score = lambda *a: calls.append(a) or real(*a)
    examples = [task[0]] * 3
    completions = [" Plans for a water park.", " A hotel was approved.", " Nothing."]
    found = task.checked_metrics(examples, completions)
    assert len(calls) == 3
    assert [set(m) for m in found] == [{"rouge1", "rouge2", "rougeL"}] * 3
    del task.scorer.score
    assert [m["rouge2"] for m in found] == [
        task.score(e, c) for e, c in zip(examples, completions, strict=True)
    ]


def test_xsum_cuts_summaries_to_32_words(files: dict[str, Path]) -> None:
    task = load_task("xsum", data_files=files["xsum"])
    ex = task[0]
    filler = " ".join(f"w{i}" for i in range(32))
    completion = f" {filler} Plans for a water park and hotel in Worcestershire have been approved."
    assert task.summary(completion) == filler
    assert task.score(ex, completion) == 0.0  # the matching words come after word 32
    scorer = rouge_scorer.RougeScorer(["rouge2"])
    uncut = load_task("xsum", data_files=files["xsum"], max_summary_words=0)
    assert (
        uncut.score(ex, completion) == scorer.score(ex["summary"], completion.strip())["rouge2"].fmeasure > 0
    )
    five = load_task("xsum", data_files=files["xsum"], max_summary_words=5)
    assert five.summary(" Plans for a water park and hotel") == "Plans for a water park"
    assert task.settings()["max_summary_words"] == 32 and five.settings()["max_summary_words"] == 5


# ---------------------------------------------------------------- MBPP


def test_mbpp_needs_an_explicit_opt_in(files: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DIVERSED_ALLOW_CODE_EXECUTION", raising=False)
    from diversed.tasks.execution import CodeExecutionNotAllowed

    # Raised before the (here missing) data is even looked at.
    with pytest.raises(CodeExecutionNotAllowed, match=r"task\.allow_code_execution=true"):
        load_task("mbpp", data_files="/nonexistent/mbpp.jsonl")
    with pytest.raises(CodeExecutionNotAllowed, match="DIVERSED_ALLOW_CODE_EXECUTION=1"):
        MBPP(MBPP_FULL_ROWS)
    monkeypatch.setenv("DIVERSED_ALLOW_CODE_EXECUTION", "1")
    assert len(load_task("mbpp", data_files=files["mbpp"])) == 2


@pytest.mark.parametrize(
    ("completion", "code"),
    [
        ("def f():\n    return 1\n", "def f():\n    return 1\n"),
        ("Here:\n```python\ndef f():\n    return 1\n```\nIt returns 1.", "def f():\n    return 1\n"),
        ("```\ndef f():\n    return 1\n```", "def f():\n    return 1\n"),
        ("```py\ndef f():\n    return 1", "def f():\n    return 1"),  # generation stopped inside the fence
    ],
)
def test_mbpp_code_extraction(completion: str, code: str) -> None:
    assert extract_code(completion) == code


def test_mbpp_ends_after_its_first_closed_fence(files: dict[str, Path], monkeypatch) -> None:
    monkeypatch.setenv("DIVERSED_ALLOW_CODE_EXECUTION", "1")
    task = load_task("mbpp", data_files=files["mbpp"])
    chatty = "Here is the function:\n\n```python\ndef f():\n    return 1\n```\n\nIt returns 1.\n```\nx\n```"
    assert task.truncate(chatty) == "Here is the function:\n\n```python\ndef f():\n    return 1\n```"
    assert task.extract(task[0], chatty) == "def f():\n    return 1\n"
    open_fence = "```python\ndef f():\n    return 1"  # not closed yet: nothing cut, the row goes on
    assert task.truncate(open_fence) == open_fence
    tok = tiny_tokenizer([chatty.replace("\n", " ")])
    stop = task.stopper(tok)
    assert stop is not None and stop.triggers is None  # its own cut: the stopper asks about every row


def test_mbpp_scores_by_running_the_tests(files: dict[str, Path]) -> None:
    task = load_task("mbpp", data_files=files["mbpp"], allow_code_execution=True, timeout=5)
    add, scale = task[0], task[1]
    assert task.program(add, "def add(a, b):\n    return a + b") == (
        "def add(a, b):\n    return a + b\n\nassert add(1, 2) == 3\nassert add(-1, 1) == 0\n"
    )
    completions = [
        "\ndef add(a, b):\n    return a + b\n",
        "```python\ndef add(a, b):\n    return a + b\n```",
        "\ndef add(a, b):\n    return a + b\nassert add(1, 1) == 3\n",  # its own wrong test is cut off
        "\ndef add(a, b):\n    return a * b\n",
        "\ndef scale(x):\n    return x * FACTOR\n",  # needs test_setup_code
        task.target(scale),
    ]
    scores = task.score_batch([add, add, add, add, scale, scale], completions)
    assert scores == [1.0, 1.0, 1.0, 0.0, 1.0, 1.0]
    assert task.reward(add, completions[3]) == 0.0 and task.metrics(add, completions[0]) == {"pass@1": 1.0}
    assert task.settings()["timeout"] == 5.0

    sanitized = load_task(
        "mbpp", data_files=files["mbpp_sanitized"], subset="sanitized", allow_code_execution=True
    )
    ex = sanitized[0]
    assert sanitized.score(ex, ex["code"]) == 1.0
    assert sanitized.score(ex, "def volume_sphere(r):\n  return 4 * r") == 0.0
    assert sanitized.settings()["subset"] == "sanitized"


def test_leading_separator_is_not_a_stop():
    from diversed.tasks.base import Task

    class Plain(Task):
        stop = ("\n\n",)

    task = Plain([])
    assert task.truncate("\n\nThe cat sat.\n\nNext article") == "\n\nThe cat sat."
    assert task.truncate("A summary.\n\nMore") == "A summary."
    assert task.truncate("\n\n") == "\n\n"


def test_stopper_keeps_the_fewest_tokens_that_hold_a_stop_sequence():
    from diversed.tasks.base import Task

    class Plain(Task):
        stop = ("Question:", "is 4")

    text = "The answer is 4. Question: What"
    tok = tiny_tokenizer([text])
    ids = tok(text)["input_ids"]  # one token per word
    stopper = Plain([]).stopper(tok)
    assert stopper(ids[:3]) is None  # "The answer is"
    assert stopper(ids[:4]) == 4  # "is 4" spans two tokens: it is complete with the 4th
    assert stopper(ids) == 4  # the earliest stop sequence, wherever the text now ends
    assert Plain([], stop=("Question:",)).stopper(tok)(ids) == 5
    assert Plain([], stop=()).stopper(tok) is None  # nothing to stop at: the engine runs to EOS
    for bad in ([1, 2], "\n", [""]):
        with pytest.raises(ValueError, match="stop must be a list of non-empty strings"):
            Plain([], stop=bad)
    # called each round with the count of new tokens, it decodes only their tail first
    question = Plain([], stop=("Question:",)).stopper(tok)
    assert question(ids[:4], 1) is None and question(ids[:5], 1) == 5 and question(ids[:5], 2) == 5
    # the completion the task scores is the same, stopped or not
    task = Plain([], stop=("Question:",))
    assert task.truncate(tok.decode(ids[: task.stopper(tok)(ids)])) == task.truncate(tok.decode(ids))


# ---------------------------------------------------------------- stop triggers

TOKENIZER_CORPUS = [
    "Question: Tom has 3 apples and buys 4.\n\nAnswer: 3 + 4 = 7 apples. #### 7\n\nQuestion: next",
    "Article: The café in Zürich opened.\nSummary: it opened.\n\nArticle: 日本の天気 ☀️ is sunny, naïve.",
    "def f(x):\n    return x + 1\n\nassert f(1) == 2\nif __name__ == '__main__':\n    print('ok')",
    "Ça va? Très bien! Façades, ½ done — “quotes” and ‘single’ ones… 🙂🙃 a b c. a  b\tc",
]


def corpus_tokenizer(kind: str):
    """Small tokenizers of the kinds real models use, over TOKENIZER_CORPUS, nothing downloaded:
    byte-level BPE (GPT-2, Llama 3, Qwen), SentencePiece-style pieces with byte fallback (Llama 2,
    Mistral, Gemma: characters missing from the vocabulary become <0xNN> byte tokens), WordPiece
    (BERT: "##" pieces), and the toy one. Vocabularies are built deterministically (the BPE trainer
    is, on this corpus, for the byte-level one)."""
    import re

    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from diversed.models.toy_corpus import build_tokenizer

    if kind == "toy":
        return build_tokenizer()
    text = "".join(TOKENIZER_CORPUS)
    if kind == "byte-level":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=400, special_tokens=["<eos>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        )
        tok.train_from_iterator(TOKENIZER_CORPUS, trainer)
        return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<eos>")
    if kind == "sentencepiece":
        words = sorted({"▁" + w for w in text.split() if w.isascii()})
        chars = sorted({c for c in text if c.isascii() and c != " "} | {"▁"})
        pieces = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)] + chars + words
        vocab = [(p, 0.0 if i < 259 else -float(len(chars) + 1) + len(p)) for i, p in enumerate(pieces)]
        tok = Tokenizer(models.Unigram(vocab, unk_id=0, byte_fallback=True))
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        tok.decoder = decoders.Sequence(
            [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
        )
        return PreTrainedTokenizerFast(
            tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
        )
    assert kind == "wordpiece"
    words = sorted(set(re.findall(r"\w+|[^\w\s]", text)))
    chars = sorted({c for c in text if not c.isspace()})
    vocab = ["[UNK]", "[SEP]"] + chars + ["##" + c for c in chars] + [w for w in words if len(w) > 1]
    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", sep_token="[SEP]")


@pytest.mark.parametrize("kind", ["byte-level", "sentencepiece", "wordpiece", "toy"])
def test_stop_triggers_hold_every_token_that_completes_a_stop_sequence(kind: str) -> None:
    import random

    from diversed.tasks.base import Task

    tok = corpus_tokenizer(kind)
    rng = random.Random(0)
    text = "".join(TOKENIZER_CORPUS)
    # encoded text (stop sequences where they occur) and random ids (odd byte mixes, special tokens)
    seqs = [tok.encode(t, add_special_tokens=False) for t in TOKENIZER_CORPUS]
    for _ in range(40):
        start = rng.randrange(len(text))
        seqs.append(tok.encode(text[start : start + rng.randrange(5, 60)], add_special_tokens=False))
        seqs.append([rng.randrange(len(tok)) for _ in range(rng.randrange(2, 25))])
    stops = [
        ("\n\n", "\nArticle:"),
        ("Question:",),
        ("\nassert", "\nif __name__"),
        (".", "\n"),
        ("é",),
        ("🙂",),
    ]
    stops += [("a b",), ("Answer: ",)]  # a space inside, and at the end (SentencePiece's "▁" pieces)
    completed = 0
    for stop in stops:
        stopper = Task([], stop=stop).stopper(tok)
        mask = stopper.triggers
        assert mask.dtype == torch.bool and mask.shape == (len(tok),)
        for ids in seqs:
            held = [stopper._stopped(ids[:n]) for n in range(len(ids) + 1)]
            for n in range(1, len(ids) + 1):
                if held[n] and not held[n - 1]:  # the n-th token made the text hold a stop sequence
                    completed += 1
                    assert mask[ids[n - 1]], (
                        kind,
                        stop,
                        tok.decode(ids[:n]),
                        tok.convert_ids_to_tokens(ids[n - 1]),
                    )
    assert completed >= 40  # the check above ran on many completions (61-89 per tokenizer)
    # and the mask leaves out most tokens for stop sequences that few tokens can end
    assert Task([], stop=("Question:",)).stopper(tok).triggers.float().mean() < 0.5


def test_stopper_is_built_once_per_tokenizer_and_has_triggers_only_with_the_base_truncate() -> None:
    from diversed.tasks.base import Task

    class Own(Task):
        stop = ("\n",)

        def truncate(self, completion: str) -> str:  # cuts its own way: every row must be asked
            return completion[: completion.find("!")] if "!" in completion else completion

    tok, other = corpus_tokenizer("toy"), corpus_tokenizer("toy")
    task = Task([], stop=("\n",))
    assert task.stopper(tok) is task.stopper(tok) and task.stopper(other) is not task.stopper(tok)
    assert task.stopper(tok).triggers is not None and Own([]).stopper(tok).triggers is None


def test_stopper_without_triggers_when_the_tokenizer_cannot_decode_every_id(caplog) -> None:
    from diversed.tasks.base import Task

    class Picky:  # decodes the ids it knows, raises on the rest (as some remote-code tokenizers do)
        def __init__(self, tok):
            self.tok = tok

        def __len__(self):
            return len(self.tok) + 5

        def __getattr__(self, name):
            return getattr(self.tok, name)

        def batch_decode(self, seqs, **kwargs):
            if any(t >= len(self.tok) for s in seqs for t in s):
                raise KeyError("unknown id")
            return self.tok.batch_decode(seqs, **kwargs)

    tok = Picky(corpus_tokenizer("toy"))
    stopper = Task([], stop=(".",)).stopper(tok)
    assert stopper.triggers is None and "stop triggers unavailable (KeyError" in caplog.text
    ids = tok.tok.encode("so 12.", add_special_tokens=False)
    assert stopper(ids) == len(ids)  # the stopper itself still works, for every row


@pytest.mark.parametrize("bad", [2.0, -0.5, float("nan"), "1", None, True])
def test_a_score_that_is_not_a_fraction_stops_the_sweep_at_its_first_batch(bad):
    """evaluate scores through `checked_metrics`: a task's score outside [0, 1] (or not a number) is
    refused with the task, the value and the fix, before a record that readers would skip is written."""
    from diversed.tasks.toy import ToyTask

    class Broken(ToyTask):
        def score(self, example, completion):
            return bad if example["prompt"] == "b" else 1.0

    task = Broken([{"prompt": "a", "answer": "1"}, {"prompt": "b", "answer": "2"}])
    assert ToyTask(task.examples).checked_metrics(task.examples, ["1", "2"]) == [{"exact_match": 1.0}] * 2
    with pytest.raises(
        ValueError, match=r"task 'toy' scored a completion .*a score must be a number in \[0, 1\]"
    ):
        task.checked_metrics(task.examples, ["1", "2"])


def test_metrics_without_the_headline_metric_are_refused():
    from diversed.tasks.toy import ToyTask

    class Elsewhere(ToyTask):
        def metrics(self, example, completion):
            return {"other": 1.0}

    with pytest.raises(
        ValueError, match=r"task 'toy' scored a completion None \(metric 'exact_match'.*metrics\(\)"
    ):
        Elsewhere([{"prompt": "a", "answer": "1"}]).checked_metrics([{"prompt": "a", "answer": "1"}], ["1"])


def test_a_task_declares_its_options_once() -> None:
    """Options are inherited and redeclared per class, checked when a task is built directly too, and
    a constructor keyword the class does not declare is refused when the class is defined."""
    from diversed.tasks.base import Option, Task
    from diversed.tasks.toy import ToyTask

    assert list(XSum.options) == ["stop_early", "use_stemmer", "max_summary_words"]
    assert (
        XSum.options["max_summary_words"].default == 32
        and CNNDailyMail.options["max_summary_words"].default is None
    )
    assert set(MBPP.options) - set(Task.options) == {
        "subset",
        "test_format",
        "timeout",
        "allow_code_execution",
        "workers",
    }
    with pytest.raises(ValueError, match=r"toy: stop_early='maybe': Input should be a valid boolean"):
        ToyTask([], stop_early="maybe")
    with pytest.raises(ValueError, match=r"toy takes no option strict; its own options are stop_early"):
        ToyTask([], strict=True)
    with pytest.raises(
        TypeError, match=r"Sloppy.__init__ takes \['strict'\], which Sloppy.options does not declare"
    ):

        class Sloppy(ToyTask):
            def __init__(self, examples, *, strict=False, **kwargs):
                super().__init__(examples, **kwargs)

    class Declared(ToyTask):
        options = {"strict": Option(False, bool), "note": Option("", str, recorded=False)}

    task = Declared([], strict=1)
    assert task.strict is True and task.note == ""
    assert task.option_settings() == {"stop_early": True, "strict": True}
    assert {
        "strict": True,
        "stop_early": True,
    }.items() <= task.settings().items() and "note" not in task.settings()


class ByteTokenizer:
    """Bytes as ids: no start token, no chat template (as a tokenizer without BOS would have)."""

    chat_template = None

    def __call__(self, text, add_special_tokens: bool = True):
        if isinstance(text, list):
            return {"input_ids": [list(t.encode()) for t in text]}
        return {"input_ids": list(text.encode())}


def test_empty_prompts_are_named_once_and_a_prompt_of_no_token_is_refused(caplog) -> None:
    """An example with no text of its own (blank, or the template alone) is warned of once, naming it;
    one that encodes to no token at all cannot be decoded and is refused, naming it."""
    from diversed.tasks.data import DataFileError

    rows = [dict(GSM8K_ROWS[0], id="full"), {"id": "blank", "question": " \t", "answer": "#### 1"}]
    task = GSM8K(rows)
    tok = ByteTokenizer()
    assert task.empty_prompts(tok) == [1]  # "Question: \t\n\nAnswer:" is the template alone
    with caplog.at_level("WARNING"):
        first = task.encode(tok, task.examples)
        assert task.encode(tok, task.examples) == first
    said = [m for m in caplog.messages if "prompts are empty" in m]
    assert said == [
        "gsm8k: 1 of 2 prompts are empty (examples blank): none holds any text of its example, so each "
        "is decoded from the template or the start token alone and its score says nothing of the task. "
        "Fix or remove those rows of the data (task.data_files)"
    ]
    toy = TASKS["toy"](
        [{"id": "ok", "prompt": "Q: 1+1=", "answer": "2"}, {"id": "gone", "prompt": "", "answer": "1"}]
    )
    assert toy.empty_prompts(tok) == [1]
    with pytest.raises(DataFileError, match=r"toy: the prompts of examples gone have no token at all"):
        toy.encode(tok, toy.examples)
