"""Whether a task's prompts fit a pair's context: `check_context`, asked before any weights load by
evaluate (each task of a sweep) and by the training entry points (`training/trainer.prepare_training`:
the training and validation prompts).

It reads the pair's card (`pair.describe_pair`: its tokenizer and positions) and the task's encoded
prompts; it loads no weights and decodes nothing.
"""

from __future__ import annotations

from typing import Any

from diversed.errors import ConfigError


def check_context(card: Any, task: Any, max_new_tokens: int, what: str = "task") -> int:
    """ConfigError if the longest encoded prompt plus `max_new_tokens` exceeds the pair's context
    (positions); returns the longest prompt's length. Nothing to check without a card."""
    if card is not None and hasattr(task, "resolve_chat_template"):
        task.resolve_chat_template(card.tokenizer)  # chat_template=auto settled before settings are recorded
    if card is None or not len(task):
        return 0
    longest = max(len(p) for p in task.encode(card.tokenizer, task.examples))
    if card.positions and longest + max_new_tokens > card.positions:
        room = card.positions - max_new_tokens
        fix = (
            f"set {what}.max_prompt_tokens={room} (a long prompt loses the end of its document, or its start)"
            if room > 0
            else (f"lower {what}.max_new_tokens below {card.positions}")
        )
        raise ConfigError(
            f"{task.name}: the longest prompt has {longest} tokens and up to {max_new_tokens} new tokens "
            f"follow, but the pair {card.name} has {card.positions} positions: {fix}, or use models with a "
            "longer context"
        )
    return longest
