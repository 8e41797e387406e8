"""Checks that need the data and the pair's files but not its weights, run before loading them.

The schema (`schema.py`) has checked the settings; here, with the task's examples loaded and the
pair described from its files (`pair.describe_pair`): every prompt plus the new tokens fits both
models' context, no draft length N exceeds what the new tokens let the engine draft in a round
(`check_draft_lengths`), and each head is readable, finite and was trained for this pair (its
hidden sizes, and the models it records), each fine-tuned draft is readable and has the pair's
vocabulary, and a training run's `ckpt_path` is a readable checkpoint that fits the pair (a damaged
one is named with the run's other whole checkpoints). Each failure says what to set instead. (Data
files, their lines and fields, and empty data are checked where they are read, in `tasks/data.py`;
empty prompts where they are encoded, `Task.encode_cut`.)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from diversed.errors import ConfigError
from diversed.files.provenance import directory_digest

LIGHTNING_CKPT_NAMES = ("last", "best", "hpc", "registry")  # ckpt_path values Lightning resolves itself


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


def check_draft_lengths(
    draft_lengths: Sequence[int], max_new_tokens: int, first_token: str = "ensemble", what: str = "task"
) -> None:
    """ConfigError if a draft length N is more than the engine drafts in a round within
    `max_new_tokens` (`engine.most_drafts`): such an N would run as that cap and be recorded as
    given. N = 1, the least there is, always passes."""
    from diversed.decoding.engine import most_drafts

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


def check_heads(card: Any, heads: Sequence[str], allow_other_pairs: bool = False) -> dict[str, Any]:
    """Each head directory's digest, after checking it is a saved head (its config and a readable
    head.safetensors whose weights are finite: `heads.check_finite`, which names each tensor holding
    NaN or ±inf) that fits this pair (`heads.check_head`: its hidden sizes, and the pair it
    records it was trained on). A head of another pair is refused unless `allow_other_pairs`; then its
    digest comes with the pair it was trained on (part of its points' settings). A head saved
    without its pair's identity (older diversed) is let through with a warning."""
    from safetensors.torch import load_file

    from diversed.models.heads import NON_FINITE_FIX, WEIGHTS_NAME, check_finite, check_head, read_config

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
                "dynamic out of sweep.methods"
            )
        try:
            config = read_config(head)
        except OSError as e:  # no config, or one cut short or damaged: named with the fix
            raise ConfigError(
                f"sweep.heads entry {head}: {e}, or leave dynamic out of sweep.methods"
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


def _head_in_run(head: str) -> str | None:
    """`<run>/head` where `head` is not a saved head but a train run's directory (or its checkpoints
    directory, or a checkpoint in it) whose `head/` is one; else None."""
    from diversed.models.heads import CONFIG_NAME

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


def check_drafts(card: Any, drafts: Sequence[str]) -> dict[str, str]:
    """Each fine-tuned draft's digest, after checking it is a saved model whose vocabulary (and
    tokenizer, if it has one) is the pair's."""
    from diversed.decoding.inputs import shared_vocab
    from diversed.files.provenance import model_digest

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

            from diversed.models.pair import check_tokenizers, text_config

            text = text_config(AutoConfig.from_pretrained(path))
            shared_vocab(card.vocab["target"], int(text.vocab_size))
            if (path / "tokenizer_config.json").is_file():
                check_tokenizers(
                    card.tokenizer, AutoTokenizer.from_pretrained(path), "the pair", f"draft {draft}"
                )
        digests[str(draft)] = model_digest(path)
    return digests


def check_checkpoint(
    path: str | None, expected: dict[str, tuple[int, ...]], what: str, *, weights_only: bool
) -> None:
    """ConfigError, naming the file and the fix, unless `path` (a run's `ckpt_path`) is a readable
    Lightning checkpoint whose tensors fit `expected` (name -> shape, for this pair): memory-mapped,
    so no tensor is read. `what` names the module's part it holds ("head", "draft"). LoRA's
    wrapped names (base_model.model., .base_layer) are compared as the plain ones."""
    if not path or str(path) in LIGHTNING_CKPT_NAMES:
        return
    import zipfile

    import torch

    fix = (
        "give a checkpoint of a run of this pair (<run dir>/checkpoints/last.ckpt), "
        "or ckpt_path=null to start afresh"
    )
    if not zipfile.is_zipfile(path):  # torch.save writes a zip archive, whose directory is at its end
        size = Path(path).stat().st_size
        raise ConfigError(
            f"ckpt_path={path} is not a complete checkpoint ({size} bytes, not a whole zip archive as "
            f"torch.save writes: cut short, damaged or another kind of file): {_instead(path, fix)}"
        )
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=weights_only, mmap=True)
    except Exception as e:  # cut short, empty, not a torch file
        raise ConfigError(
            f"ckpt_path={path} is not a readable checkpoint (incomplete or damaged: {type(e).__name__}: "
            f"{str(e).split('. ')[0]}): {_instead(path, fix)}"
        ) from None
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get("state_dict"), dict):
        raise ConfigError(f"ckpt_path={path} is not a Lightning checkpoint (no state_dict): {fix}")
    shapes = {
        k.replace("base_model.model.", "").replace(".base_layer", ""): tuple(v.shape)
        for k, v in ckpt["state_dict"].items()
        if hasattr(v, "shape")
    }
    common = [k for k in shapes if k in expected]
    if expected and not common:
        held = ", ".join(list(shapes)[:3]) or "nothing"
        raise ConfigError(
            f"ckpt_path={path} holds no tensor of this entry point's {what} (it holds {held}...): {fix}"
        )
    wrong = [f"{k} {shapes[k]} (this pair: {expected[k]})" for k in common if shapes[k] != expected[k]]
    if wrong:
        raise ConfigError(
            f"ckpt_path={path} was saved for another {what} or pair: "
            + "; ".join(wrong[:3])
            + (f" and {len(wrong) - 3} more" if len(wrong) > 3 else "")
            + f": {fix}"
        )


def _instead(path: str | Path, fix: str) -> str:
    """The fix for a damaged checkpoint: the run's other whole checkpoints (beside it, newest first), or
    `fix`."""
    import zipfile

    path = Path(path)
    others = [p for p in path.parent.glob("*.ckpt") if p.name != path.name and zipfile.is_zipfile(p)]
    if not others:
        return fix
    others.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    named = ", ".join(f"ckpt_path={p}" for p in others[:3])
    return f"resume from another checkpoint of the run ({named}), or ckpt_path=null to start afresh"


def model_shapes(card: Any, role: str) -> dict[str, tuple[int, ...]]:
    """The tensor shapes of a local model of the pair (`role`: target or draft) from its safetensors
    headers (no tensor read); {} for a model that is not a local directory."""
    from safetensors import safe_open

    path = ((card.identity.get(role) or {}).get("path") if card is not None else None) or ""
    shapes: dict[str, tuple[int, ...]] = {}
    for file in sorted(Path(path).glob("*.safetensors")) if path else []:
        with safe_open(str(file), "pt") as f:
            shapes |= {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    return shapes


def describe(card: Any) -> dict[str, Any]:
    """The card as a plain dict for logs and settings files."""
    if card is None:
        return {}
    return {"name": card.name, **card.identity, "vocab": card.vocab, "positions": card.positions}
