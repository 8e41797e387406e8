"""Checks that need the data and the pair's files but not its weights, run before loading them.

The schema (`schema.py`) has checked the settings; here, with the task's examples loaded and the
pair described from its files (`pair.describe_pair`): every prompt plus the new tokens fits both
models' context, and each head was trained for this pair's hidden sizes. Each failure says what to
set instead. (Data files, their lines and fields, and empty data are checked where they are read,
in `tasks/data.py`.)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from diversed.errors import ConfigError
from diversed.provenance import directory_digest


def check_context(card: Any, task: Any, max_new_tokens: int, what: str = "task") -> int:
    """ConfigError if the longest encoded prompt plus `max_new_tokens` exceeds the pair's context
    (positions); returns the longest prompt's length. Nothing to check without a card."""
    if card is None or not len(task):
        return 0
    longest = max(len(p) for p in task.encode(card.tokenizer, task.examples))
    if card.positions and longest + max_new_tokens > card.positions:
        room = card.positions - max_new_tokens
        fix = f"set {what}.max_prompt_tokens={room} (long prompts keep their end)" if room > 0 else (
            f"lower {what}.max_new_tokens below {card.positions}"
        )
        raise ConfigError(
            f"{task.name}: the longest prompt has {longest} tokens and up to {max_new_tokens} new tokens "
            f"follow, but the pair {card.name} has {card.positions} positions: {fix}, or use models with a "
            "longer context"
        )
    return longest


def check_heads(card: Any, heads: Sequence[str]) -> dict[str, str]:
    """Each head directory's digest, after checking it is a saved head for this pair's hidden sizes."""
    digests = {}
    for head in heads:
        config_file = Path(head) / "head_config.json"
        if not config_file.is_file():
            raise ConfigError(f"sweep.heads entry {head} is not a saved head (no head_config.json): train one first "
                             "(python -m diversed.train with the same pair and task), or leave dynamic out of "
                             "sweep.methods")  # fmt: skip
        config = json.loads(config_file.read_text())
        if card is not None:
            want = (card.hidden["draft"], card.hidden["target"])
            got = (config.get("draft_hidden_size"), config.get("target_hidden_size"))
            if None not in want and tuple(got) != want:
                raise ConfigError(
                    f"head {head} was trained for hidden sizes (draft={got[0]}, target={got[1]}) but the pair "
                    f"{card.name} has (draft={want[0]}, target={want[1]}) (head pair: {config.get('pair', 'unknown')}); "
                    "train a head for this pair"
                )
        digests[str(head)] = directory_digest(head)
    return digests


def check_drafts(card: Any, drafts: Sequence[str]) -> dict[str, str]:
    """Each fine-tuned draft's digest, after checking it is a saved model whose vocabulary (and
    tokenizer, if it has one) is the pair's."""
    from diversed.inputs import shared_vocab
    from diversed.provenance import model_digest

    digests = {}
    for draft in drafts:
        path = Path(draft)
        if not (path / "config.json").is_file():
            raise ConfigError(f"sweep.draft_models entry {draft} is not a saved model (no config.json); fine-tune one "
                             "with python -m diversed.distill")  # fmt: skip
        if card is not None:
            from transformers import AutoConfig, AutoTokenizer

            from diversed.pair import check_tokenizers

            config = AutoConfig.from_pretrained(path)
            text = config.get_text_config() if hasattr(config, "get_text_config") else config
            shared_vocab(card.vocab["target"], int(text.vocab_size))
            if (path / "tokenizer_config.json").is_file():
                check_tokenizers(card.tokenizer, AutoTokenizer.from_pretrained(path), "the pair", f"draft {draft}")
        digests[str(draft)] = model_digest(path)
    return digests


def describe(card: Any) -> dict[str, Any]:
    """The card as a plain dict for logs and settings files."""
    if card is None:
        return {}
    return {"name": card.name, **card.identity, "vocab": card.vocab, "positions": card.positions}
