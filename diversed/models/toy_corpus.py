"""The toy corpus: two skills with free wording (two-digit additions, and counting a letter),
their splits, the two house styles and the tokenizer. The toy pair (`toy.py`) is trained on it and
the toy task (`tasks/toy.py`) reads its examples from it; it imports neither.

An addition problem has the prompt ``"Q: 37+48="``; a counting one ``"C: bacbdba="`` asks how often
the string's first letter occurs in it (3: matching every letter against the first takes two
steps of attention, which the one-layer draft does not have). The completion is free wording
followed by the answer, ``" so we get 85."`` or ``" thus it is 3."``. The wording fills two slots
drawn at random, an opener (" so", " thus", ...) and a two-word phrase (" we get", " it equals", ...).
The reward (exact match of the answer, `diversed.tasks.toy`) never looks at the wording. Each skill's
problems (8100 additions, 16384 strings) are split once by the seed into train /
validation / test (500 each for the last two), so test problems are never trained on; training
draws train problems with fresh wording per step.

Why two house styles. Real targets and drafts come from different training runs and phrase
things differently where nothing is at stake. Here each model is trained on the same problems
with its own preferences over the wording (Zipf-like, in opposite orders, see `STYLES`), so p
and q disagree at the wording although every phrasing is plausible to both.

Tokenizer. The wording words (with or without one leading space) are single tokens and every
other character is its own token, digits included, so any ASCII text round-trips; a bos token
is prepended. It is a `tokenizers` word-level model wrapped as a `PreTrainedTokenizerFast`.
"""

from __future__ import annotations

import itertools
import random
import string
from typing import Any

from diversed.errors import ConfigError

OPENERS = ("so", "thus", "then", "well", "hence", "now")
PHRASES = ("that makes", "we get", "it equals", "this gives", "you get", "it is")
LOW, HIGH = 10, 99  # operands are two-digit numbers
SPLIT_SIZES = {"test": 500, "validation": 500}  # train is the rest (7100 problems)
SPLITS = ("train", "validation", "test")


def _zipf(n: int, reverse: bool, s: float = 1.0) -> tuple[float, ...]:
    w = [1.0 / (r + 1) ** s for r in range(n)]
    w = w[::-1] if reverse else w
    return tuple(x / sum(w) for x in w)


# Each model's preferences over (OPENERS, PHRASES); "reference" is what the task's targets use.
STYLES: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "target": (_zipf(len(OPENERS), False, 0.7), _zipf(len(PHRASES), False, 0.7)),
    "draft": (_zipf(len(OPENERS), True, 0.3), _zipf(len(PHRASES), True, 0.3)),
    "reference": (
        tuple(1 / len(OPENERS) for _ in OPENERS),
        tuple(1 / len(PHRASES) for _ in PHRASES),
    ),
}


SKILLS = ("add", "count")  # two-digit addition; counting the first letter of a string
COUNT_LETTERS, COUNT_LENGTH = "abcd", 7


def problems(split: str, seed: int = 0, skill: str = "add") -> list[tuple[int, ...]]:
    """The problems of `split`: for "add" all two-digit pairs (a, b), for "count" all strings of
    seven letters a-d (as letter indices); shuffled by `seed` and cut into test, validation and train."""
    if split not in SPLITS:
        raise ConfigError(f"unknown toy split {split!r}; choose from {SPLITS}")
    if skill == "add":
        items = [(a, b) for a in range(LOW, HIGH + 1) for b in range(LOW, HIGH + 1)]
        random.Random(f"toy-split-{seed}").shuffle(items)
    elif skill == "count":
        items = list(itertools.product(range(len(COUNT_LETTERS)), repeat=COUNT_LENGTH))
        random.Random(f"toy-count-split-{seed}").shuffle(items)
    else:
        raise ConfigError(f"unknown toy skill {skill!r}; choose from {SKILLS}")
    n_test, n_val = SPLIT_SIZES["test"], SPLIT_SIZES["validation"]
    bounds = {
        "test": (0, n_test),
        "validation": (n_test, n_test + n_val),
        "train": (n_test + n_val, len(items)),
    }
    lo, hi = bounds[split]
    return items[lo:hi]


def _letters(problem: tuple[int, ...]) -> str:
    return "".join(COUNT_LETTERS[i] for i in problem)


def prompt_text(*problem: int, skill: str = "add") -> str:
    """ "Q: 37+48=" (add) or "C: bacbdba=" (count)."""
    if skill == "count":
        return f"C: {_letters(problem)}="
    a, b = problem
    return f"Q: {a}+{b}="


def answer(*problem: int, skill: str = "add") -> str:
    """What the reward checks: the sum, or how often the first letter occurs ("bacbdba": 3)."""
    return str(problem.count(problem[0])) if skill == "count" else str(sum(problem))


def wording(rng: random.Random, style: str = "reference") -> str:
    """The free part of a completion, e.g. " so we get": an opener and a phrase in `style`."""
    w_open, w_phrase = STYLES[style]
    opener = rng.choices(OPENERS, weights=w_open)[0]
    phrase = rng.choices(PHRASES, weights=w_phrase)[0]
    return f" {opener} {phrase}"


def completion_text(*problem: int, rng: random.Random, style: str = "reference", skill: str = "add") -> str:
    """Free wording, then the answer that the reward checks: " so we get 85."."""
    return f"{wording(rng, style)} {answer(*problem, skill=skill)}."


def examples(split: str, seed: int = 0, skill: str = "add") -> list[dict[str, Any]]:
    """Task examples of `split` (deterministic from `seed`); the reference wording is uniform."""
    rng = random.Random(f"toy-reference-{seed}-{split}" + ("" if skill == "add" else f"-{skill}"))
    out = []
    for problem in problems(split, seed, skill):
        name = f"toy-{problem[0]}+{problem[1]}" if skill == "add" else f"count-{_letters(problem)}"
        row = {
            "id": name,
            "prompt": prompt_text(*problem, skill=skill),
            "answer": answer(*problem, skill=skill),
            "reference": completion_text(*problem, rng=rng, skill=skill),
        }
        if skill == "add":
            row = {
                "id": name,
                "a": problem[0],
                "b": problem[1],
                **{k: v for k, v in row.items() if k != "id"},
            }
        out.append(row)
    return out


def corpus(
    n: int, *, style: str = "target", seed: int = 0, split: str = "train", skills: tuple[str, ...] = ("add",)
) -> list[tuple[str, str]]:
    """`n` (prompt, completion) training pairs: problems of `split` drawn with replacement (the
    skill uniformly at random), wording in `style`. Deterministic from (`seed`, `style`, skills)."""
    pools = {skill: problems(split, seed, skill) for skill in skills}
    rng = random.Random(
        f"toy-corpus-{seed}-{style}-{split}" + ("" if skills == ("add",) else f"-{'-'.join(skills)}")
    )
    out = []
    for _ in range(n):
        skill = skills[0] if len(skills) == 1 else rng.choice(skills)
        problem = rng.choice(pools[skill])
        out.append(
            (prompt_text(*problem, skill=skill), completion_text(*problem, rng=rng, style=style, skill=skill))
        )
    return out


# ----------------------------------------------------------------------------- tokenizer

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"


def build_tokenizer(model_max_length: int = 512):
    """Word-level tokenizer: wording words are tokens, every other character is a token."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = sorted({w for text in OPENERS + PHRASES for w in text.split()} | {"Q"})
    vocab = {t: i for i, t in enumerate((PAD, BOS, EOS, UNK))}
    for ch in string.printable:
        vocab.setdefault(ch, len(vocab))
    for w in words:
        for tok in (w, " " + w):
            vocab.setdefault(tok, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    alternatives = "|".join(sorted(words, key=len, reverse=True))
    # a known word (optionally after one space) not followed by a letter, else one character
    tok.pre_tokenizer = pre_tokenizers.Split(
        Regex(rf"[ ]?(?:{alternatives})(?![A-Za-z])|[\s\S]"), behavior="isolated"
    )
    tok.decoder = decoders.Fuse()
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, vocab[BOS])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        padding_side="left",
        model_max_length=model_max_length,
    )
