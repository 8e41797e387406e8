"""Weight heads: small modules mapping both models' last hidden states to the target weight w.

`WeightHead` is the paper's head (a linear layer on [h_draft; h_target] giving two logits, then a
softmax; w is the probability of the target logit) and generalises to an MLP and to extra
per-position features that verification gets for free (entropies of p and q, TV(p, q)). Heads
are saved as safetensors plus a JSON config (each file written whole, `atomic.py`) and loaded
without pickle, a damaged file named with the fix (`read_config`); the config records the
pair a head was trained on (`pair_record`: its models' identity), and `same_pair` tells whether
that is the pair at hand. This module does not train heads (see `train.py`) and does not run
models.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save
from torch import Tensor, nn

from diversed.atomic import write_file
from diversed.errors import ConfigError, MissingFile
from diversed.verify import total_variation

CONFIG_NAME = "head_config.json"
WEIGHTS_NAME = "head.safetensors"
FEATURES = ("entropy_p", "entropy_q", "tv")


def pair_record(identity: dict[str, Any]) -> dict[str, Any]:
    """What a head records of the pair it is trained on (`pair_identity` in head_config.json): the
    identity of the pair's card (`pair.describe_pair`) without dtype, device and forward path, which
    do not change which models they are."""
    return {k: v for k, v in identity.items() if k not in ("dtype", "device", "forward")}


def same_pair(recorded: dict[str, Any], identity: dict[str, Any]) -> bool | None:
    """Whether a head's recorded pair (`pair_record`) is the pair a card's `identity` describes:
    local models by their weights' digest (not their paths: a copied directory is the same model),
    Hub models by id and commit, random pairs by shape and seed. None where it cannot be told (one
    side a Hub id, the other a local directory)."""
    current = pair_record(identity)
    if "random" in recorded or "random" in current:
        return (recorded.get("random"), recorded.get("seed")) == (current.get("random"), current.get("seed"))
    verdicts = [_same_model(recorded.get(role) or {}, current.get(role) or {}) for role in ("target", "draft")]
    return False if False in verdicts else None if None in verdicts else True


def _same_model(a: dict[str, Any], b: dict[str, Any]) -> bool | None:
    if a.get("weights") and b.get("weights"):
        return a["weights"] == b["weights"]
    if a.get("id") and b.get("id"):
        return a["id"] == b["id"] and (a.get("commit") == b.get("commit") or None in (a.get("commit"), b.get("commit")))
    return None


def head_metadata(directory: str | Path) -> dict[str, Any]:
    """A saved head's `head_config.json` (hidden sizes, pair, the task it was trained on, ...), or {}
    where there is none (a moved or deleted head); a damaged one is `read_config`'s error."""
    return read_config(directory) if (Path(directory) / CONFIG_NAME).is_file() else {}


def read_config(directory: str | Path) -> dict[str, Any]:
    """A saved head's `head_config.json`; MissingFile naming it where there is none or it is not
    whole JSON (cut short, damaged)."""
    path = Path(directory) / CONFIG_NAME
    if not path.is_file():
        raise MissingFile(f"{directory} is not a saved weight head (no {CONFIG_NAME}): train one first "
                          "(python -m diversed.train with the same pair and task)")  # fmt: skip
    try:
        config = json.loads(path.read_text())
    except (ValueError, OSError) as e:  # cut short, damaged, not UTF-8
        raise MissingFile(f"{path} cannot be read ({type(e).__name__}: {e}): copy the head again, or train it "
                          "again") from None  # fmt: skip
    if not isinstance(config, dict):
        raise MissingFile(f"{path} is not a head's config (a JSON object): copy the head again, or train it again")
    return config


def _entropy(p: Tensor) -> Tensor:
    """H(p) = −Σ p log p (0·log 0 = 0)."""
    return -(p * p.clamp_min(1e-30).log()).sum(dim=-1)


class WeightHead(nn.Module):
    """w = softmax(f([h_draft; h_target; features]))[target], f linear (the paper) or an MLP.

    The last layer starts at zero, so w = 0.5 everywhere before training.
    """

    def __init__(
        self,
        draft_hidden_size: int,
        target_hidden_size: int,
        hidden_sizes: Sequence[int] = (),
        features: Sequence[str] = (),
        **metadata: Any,
    ) -> None:
        super().__init__()
        unknown = set(features) - set(FEATURES)
        if unknown:
            raise ValueError(f"unknown head features {sorted(unknown)}; choose from {FEATURES}")
        self.draft_hidden_size = int(draft_hidden_size)
        self.target_hidden_size = int(target_hidden_size)
        self.hidden_sizes = tuple(int(h) for h in hidden_sizes)
        self.features = tuple(features)
        self.metadata = dict(metadata)  # pair names, training task...: recorded in the saved config
        layers: list[nn.Module] = []
        width = self.draft_hidden_size + self.target_hidden_size + len(self.features)
        for h in self.hidden_sizes:
            layers += [nn.Linear(width, h), nn.GELU()]
            width = h
        last = nn.Linear(width, 2)  # logits for [target, draft]
        nn.init.zeros_(last.weight)
        nn.init.zeros_(last.bias)
        self.net = nn.Sequential(*layers, last)

    @property
    def uses_distributions(self) -> bool:
        return bool(self.features)

    def forward(
        self, draft_hidden: Tensor, target_hidden: Tensor, p: Tensor | None = None, q: Tensor | None = None
    ) -> Tensor:
        parts = [draft_hidden, target_hidden]
        if self.features:
            if p is None or q is None:
                raise ValueError(f"head features {self.features} need p= and q=")
            values = {"entropy_p": lambda: _entropy(p), "entropy_q": lambda: _entropy(q), "tv": lambda: total_variation(p, q)}
            parts += [values[f]().unsqueeze(-1).to(draft_hidden.dtype) for f in self.features]
        logits = self.net(torch.cat(parts, dim=-1))
        return torch.softmax(logits.float(), dim=-1)[..., 0]

    # ------------------------------------------------------------------------- persistence

    def config(self) -> dict[str, Any]:
        return {
            "draft_hidden_size": self.draft_hidden_size,
            "target_hidden_size": self.target_hidden_size,
            "hidden_sizes": list(self.hidden_sizes),
            "features": list(self.features),
            **self.metadata,
        }

    def save_pretrained(self, directory: str | Path, **metadata: Any) -> Path:
        """Write `head.safetensors` and `head_config.json` (hidden sizes, pair, task, ...), each whole
        or not at all (`atomic.write_file`)."""
        directory = Path(directory)
        self.metadata.update(metadata)
        state = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in self.state_dict().items()}
        write_file(directory / WEIGHTS_NAME, save(state))
        write_file(directory / CONFIG_NAME, (json.dumps(self.config(), indent=2, default=str) + "\n").encode())
        return directory

    @classmethod
    def from_pretrained(
        cls,
        directory: str | Path,
        *,
        draft_hidden_size: int | None = None,
        target_hidden_size: int | None = None,
        map_location: str | torch.device = "cpu",
    ) -> WeightHead:
        """Load a saved head; with the pair's hidden sizes given, a mismatch is a clear error."""
        directory = Path(directory)
        config = read_config(directory)
        for name, want in (("draft_hidden_size", draft_hidden_size), ("target_hidden_size", target_hidden_size)):
            if want is not None and int(config[name]) != int(want):
                raise ConfigError(
                    f"head at {directory} was trained for {name}={config[name]} but the pair has {want} "
                    f"(head pair: {config.get('pair', 'unknown')}); train a head for this pair"
                )
        head = cls(**config)
        try:
            state = load_file(str(directory / WEIGHTS_NAME), device=str(map_location))
        except Exception as e:  # missing, cut short, not a safetensors file
            raise MissingFile(f"{directory / WEIGHTS_NAME} cannot be read ({e}): copy the head again, or train "
                              "it again") from None  # fmt: skip
        head.load_state_dict(state)
        return head
