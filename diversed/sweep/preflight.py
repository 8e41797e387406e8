"""A sweep's checks that need the data and the pair's files but not its weights, run before loading them.

The settings (`sweep/settings.py`) are checked first; here, with the task's examples loaded and the
pair described from its files (`pair.describe_pair`; that every prompt plus the new tokens fits both
models' context is `tasks/context.check_context`, which training asks too): no draft length N exceeds
what the new tokens let the engine draft in a round (`check_draft_lengths`), and each value of a path
knob is what its knob's `Files.check` says (`methods.Files`): each head is readable, finite and was
trained for this pair (its hidden sizes, and the models it records: `check_heads`), each fine-tuned
draft is readable and has the pair's vocabulary (`check_drafts`), a plugin's own path exists
(`check_paths`). Each failure says what to set instead. (A training run's `ckpt_path` is checked by
`training/checkpoints.check_checkpoint`; data files, their lines and fields, and empty data where they
are read, in `tasks/data.py`; empty prompts where they are encoded, `Task.encode_cut`.)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from diversed.decoding.engine import most_drafts
from diversed.decoding.inputs import shared_vocab
from diversed.errors import ConfigError
from diversed.files.provenance import directory_digest, file_digest, model_digest
from diversed.models.heads import (
    CONFIG_NAME,
    NON_FINITE_FIX,
    WEIGHTS_NAME,
    check_finite,
    check_head,
    head_metadata,
    read_config,
)
from diversed.models.pair import check_tokenizers, text_config
from diversed.sweep.methods import METHODS


def check_draft_lengths(
    draft_lengths: Sequence[int], max_new_tokens: int, first_token: str = "ensemble", what: str = "task"
) -> None:
    """ConfigError if a draft length N is more than the engine drafts in a round within
    `max_new_tokens` (`engine.most_drafts`): such an N would run as that cap and be recorded as
    given. N = 1, the least there is, always passes."""
    cap = most_drafts(max_new_tokens, first_token)
    over = [int(n) for n in draft_lengths if int(n) > max(cap, 1)]
    if not over:
        return
    target = " and engine.first_token=target (the first token comes before any draft)"
    raise ConfigError(
        f"sweep.draft_lengths={[int(n) for n in draft_lengths]}: N={', '.join(map(str, over))} is more "
        f"than the engine drafts in a round with {what}.max_new_tokens={max_new_tokens}"
        f"{target if first_token == 'target' else ''}: at most {cap} (with r new tokens left it drafts "
        f"r − 1 and the token after them), so N={over[0]} would run as N={cap} and be recorded as "
        f"N={over[0]}. Set sweep.draft_lengths to values up to {max(cap, 1)}, or raise "
        f"{what}.max_new_tokens above {max(over) + (first_token == 'target')}"
    )


def _leave_out(sweep: Mapping[str, Any] | None, knob: Any, default: str) -> str:
    """The methods of `sweep.methods` that take `knob` ("dynamic"), for "leave ... out of sweep.methods"."""
    taking = [m for m in (sweep or {}).get("methods", ()) if m in METHODS and knob in METHODS[m].knobs]
    return " and ".join(taking) or default


def check_heads(
    card: Any, heads: Sequence[str], sweep: Mapping[str, Any] | None = None, knob: Any = None
) -> dict[str, Any]:
    """Each head directory's digest, after checking it is a saved head (its config and a readable
    head.safetensors whose weights are finite: `heads.check_finite`, which names each tensor holding
    NaN or ±inf) that fits this pair (`heads.check_head`: its hidden sizes, and the pair it
    records it was trained on). A head of another pair is refused unless the sweep's
    `allow_other_pair_heads`; then its digest comes with the pair it was trained on (part of its
    points' settings). A head saved without its pair's identity (older diversed) is let through with a
    warning. (`HEAD`'s `Files.check`: `knob` is the knob whose values `heads` are.)"""
    from safetensors.torch import load_file

    allow_other_pairs = bool((sweep or {}).get("allow_other_pair_heads", False))
    leave = _leave_out(sweep, knob, "dynamic")
    digests: dict[str, Any] = {}
    for head in heads:
        if (meant := _head_in_run(head)) is not None:  # a train run's directory, or its checkpoint
            fixed = ",".join(meant if h == head else str(h) for h in heads)
            raise ConfigError(
                f"sweep.heads entry {head} is a training run, not a saved head: did you mean {meant} "
                f"(the head it exported)? sweep.heads=[{fixed}]"
            )
        if not Path(head).exists():
            raise ConfigError(
                f"sweep.heads entry {head} is not a saved head: there is no such directory; give a saved "
                "head's (<train run dir>/head, which python -m diversed.train prints at its end), or leave "
                f"{leave} out of sweep.methods"
            )
        try:
            config = read_config(head)
        except OSError as e:  # no config, or one cut short or damaged: named with the fix
            raise ConfigError(
                f"sweep.heads entry {head}: {e}, or leave {leave} out of sweep.methods"
            ) from None
        weights = Path(head) / WEIGHTS_NAME
        if (problem := unreadable_safetensors(weights)) is not None:
            raise ConfigError(
                f"sweep.heads entry {head}: {weights} cannot be read ({problem}): copy the head again, "
                "or train it again"
            )
        # a head is small: its values are read here, before any of the pair's weights
        check_finite(load_file(str(weights)), f"sweep.heads entry {head}: {weights}", NON_FINITE_FIX)
        digests[str(head)] = directory_digest(head)
        if card is None:
            continue
        same = check_head(
            config,
            draft_hidden_size=card.hidden["draft"],
            target_hidden_size=card.hidden["target"],
            identity=card.identity,
            pair_name=card.name,
            allow_other_pairs=allow_other_pairs,
            head=f"head {head}",
        )
        if same is False:  # allowed: its points say which pair it was trained on
            digests[str(head)] = {
                "files": digests[str(head)],
                "trained_on_pair": config.get("pair"),
                "trained_on_models": config.get("pair_identity"),
            }
    return digests


def head_fields(head: str, found: Any) -> dict[str, Any]:
    """The record fields of a head's points (`HEAD`'s `Files.record`): the task it was trained on
    (Table 3: what each head learned on), and the pair it was trained on where that is not this one
    (`sweep.allow_other_pair_heads`: its digest says so)."""
    fields = {"head_task": head_metadata(head).get("task")}
    if isinstance(found, dict):
        fields["head_trained_on_pair"] = found["trained_on_pair"]
    return fields


def check_paths(
    card: Any, paths: Sequence[str], sweep: Mapping[str, Any] | None = None, knob: Any = None
) -> dict[str, str]:
    """Each path's digest (a directory's files, or a file's content), after checking it exists: the
    default `Files.check` of a path knob of one's own. ConfigError naming the `sweep.<key>` entry."""
    key = f"sweep.{knob.sweep}" if knob is not None else "a path knob"
    digests = {}
    for path in paths:
        if not Path(path).exists():
            raise ConfigError(
                f"{key} entry {path}: there is no such file or directory; give an existing path, or leave "
                f"{_leave_out(sweep, knob, 'the methods that take it')} out of sweep.methods"
            )
        digests[str(path)] = directory_digest(path) if Path(path).is_dir() else file_digest(path)
    return digests


def _head_in_run(head: str) -> str | None:
    """`<run>/head` where `head` is not a saved head but a train run's directory (or its checkpoints
    directory, or a checkpoint in it) whose `head/` is one; else None."""
    path = Path(head)
    if (path / CONFIG_NAME).is_file():
        return None
    run = path
    if path.suffix == ".ckpt":  # <run>/checkpoints/<step>.ckpt
        run = path.parent.parent
    elif path.name == "checkpoints":
        run = path.parent
    found = run / "head"
    return str(found) if (found / CONFIG_NAME).is_file() else None


def unreadable_safetensors(path: str | Path) -> str | None:
    """Why the safetensors file `path` cannot be read (missing, cut short, damaged: its header and
    its size are checked, no tensor is read), or None."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), "pt") as f:
            f.keys()
    except Exception as e:  # missing, truncated, not a safetensors file
        return str(e) or type(e).__name__
    return None


def check_drafts(
    card: Any, drafts: Sequence[str], sweep: Mapping[str, Any] | None = None, knob: Any = None
) -> dict[str, str]:
    """Each fine-tuned draft's digest, after checking it is a saved model whose vocabulary (and
    tokenizer, if it has one) is the pair's (`DRAFT_MODEL`'s `Files.check`)."""
    digests = {}
    for draft in drafts:
        path = Path(draft)
        if not (path / "config.json").is_file():
            raise ConfigError(
                f"sweep.draft_models entry {draft} is not a saved model (no config.json); fine-tune one "
                "with python -m diversed.distill"
            )
        try:
            json.loads((path / "config.json").read_text())
        except (ValueError, OSError) as e:
            raise ConfigError(
                f"sweep.draft_models entry {draft}: {path / 'config.json'} cannot be read "
                f"({type(e).__name__}: {e}): copy the draft again, or distil it again"
            ) from None
        for file in sorted(path.glob("*.safetensors")):
            if (problem := unreadable_safetensors(file)) is not None:
                raise ConfigError(
                    f"sweep.draft_models entry {draft}: {file} cannot be read ({problem}): copy the "
                    "draft again, or distil it again"
                )
        if card is not None:
            from transformers import AutoConfig, AutoTokenizer

            text = text_config(AutoConfig.from_pretrained(path))
            shared_vocab(card.vocab["target"], int(text.vocab_size))
            if (path / "tokenizer_config.json").is_file():
                check_tokenizers(
                    card.tokenizer, AutoTokenizer.from_pretrained(path), "the pair", f"draft {draft}"
                )
        digests[str(draft)] = model_digest(path)
    return digests


def describe(card: Any) -> dict[str, Any]:
    """The card as a plain dict for logs and settings files."""
    if card is None:
        return {}
    return {"name": card.name, **card.identity, "vocab": card.vocab, "positions": card.positions}
