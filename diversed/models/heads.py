"""Weight heads: small modules mapping both models' last hidden states to the target weight w.

`WeightHead` is the paper's head (a linear layer on [h_draft; h_target] giving two logits, then a
softmax; w is the probability of the target logit) and generalises to an MLP, to extra
per-position features that verification gets for free (entropies of p and q, TV(p, q)), to each
hidden state layer-normalised (without affine parameters) before the first layer (`normalize`: the
input's scale is then the model's no more, so one optimizer step cannot move the logits by a
model-sized amount), and to w kept inside [lo, hi] (`w_bounds`: w = lo + (hi − lo)·softmax[target],
so w(1 − w) never reaches 0 and the head cannot stall at w = 0 or 1). The class's defaults are the
paper's head (normalize=False, w_bounds=(0, 1)), as are a saved config's without these keys
(heads saved before them load as they were); `configs/head/*.yaml` train with normalize=true and
w_bounds=[0.02, 0.98]. Heads
are saved as safetensors plus a JSON config (each file written whole, `atomic.py`) and loaded
without pickle, a damaged file named with the fix (`read_config`); the config records the
pair a head was trained on (`pair_record`: its models' identity), and `same_pair` tells whether
that is the pair at hand. `check_head` is the one check of a head against a pair (hidden sizes,
and the models it records): before weights load from the pair's files (`preflight.check_heads`),
when a head is loaded for a loaded pair (`WeightHead.from_pretrained`), and when the engine starts
(`WeightHead.check_pair`). A head's weights are finite where they enter and where they leave
(`check_finite`, `NonFiniteHead` naming the file, each tensor and how many of its values are NaN or
±inf): `preflight.check_heads` reads them before the pair's weights load, `from_pretrained` on
loading, `save_pretrained` before writing, and the training module after each step (a head that
went non-finite stops the run instead of being saved). This module does not train heads (see
`train.py`) and does not run models.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save
from torch import Tensor, nn
from torch.nn import functional as F

from diversed.decoding.verify import total_variation
from diversed.errors import ConfigError, MissingFile, UserError
from diversed.files.atomic import write_file

log = logging.getLogger(__name__)

CONFIG_NAME = "head_config.json"
WEIGHTS_NAME = "head.safetensors"
FEATURES = ("entropy_p", "entropy_q", "tv")
# what to do with a saved head whose weights are not finite
NON_FINITE_FIX = (
    "its training diverged or the file is damaged; copy the head again, or train it again "
    "(python -m diversed.train, with a lower learning rate if it diverged)"
)


class NonFiniteHead(UserError, ValueError):
    """A head's weights hold NaN or ±inf (a training run that diverged, a damaged copy): each such
    w is NaN, and every draft it judges is rejected."""


def nonfinite(state: Mapping[str, Tensor]) -> list[str]:
    """One line per floating-point tensor of `state` holding NaN or ±inf: its name and how many of
    its values are NaN and how many ±inf ("net.0.weight: 1 NaN of its 96 values")."""
    lines = []
    for name, tensor in state.items():
        if not tensor.is_floating_point():
            continue
        nan, inf = int(torch.isnan(tensor).sum()), int(torch.isinf(tensor).sum())
        if nan or inf:
            counts = " and ".join(f"{n} {kind}" for n, kind in ((nan, "NaN"), (inf, "±inf")) if n)
            lines.append(f"{name}: {counts} of its {tensor.numel()} values")
    return lines


def check_finite(state: Mapping[str, Tensor], what: str, fix: str) -> None:
    """NonFiniteHead, naming `what` (the file or the run), each tensor of `state` holding NaN or ±inf
    (`nonfinite`) and `fix`, unless every value is finite."""
    if lines := nonfinite(state):
        raise NonFiniteHead(f"{what} holds non-finite weights ({'; '.join(lines)}): {fix}")


def pair_record(identity: dict[str, Any]) -> dict[str, Any]:
    """What a head records of the pair it is trained on (`pair_identity` in head_config.json): the
    identity of the pair's card (`pair.describe_pair`) without dtype, device, forward path and the
    draft's or the target's int8 rounding, which do not change which models they are."""
    return {
        k: v
        for k, v in identity.items()
        if k not in ("dtype", "device", "forward", "draft_quantize", "target_quantize")
    }


def same_pair(recorded: dict[str, Any], identity: dict[str, Any]) -> bool | None:
    """Whether a head's recorded pair (`pair_record`) is the pair a card's `identity` describes:
    local models by their weights' digest (not their paths: a copied directory is the same model),
    Hub models by id and commit, random pairs by shape and seed. None where it cannot be told (one
    side a Hub id, the other a local directory)."""
    current = pair_record(identity)
    if "random" in recorded or "random" in current:
        return (recorded.get("random"), recorded.get("seed")) == (current.get("random"), current.get("seed"))
    verdicts = [
        _same_model(recorded.get(role) or {}, current.get(role) or {}) for role in ("target", "draft")
    ]
    return False if False in verdicts else None if None in verdicts else True


def _same_model(a: dict[str, Any], b: dict[str, Any]) -> bool | None:
    if a.get("weights") and b.get("weights"):
        return a["weights"] == b["weights"]
    if a.get("id") and b.get("id"):
        return a["id"] == b["id"] and (
            a.get("commit") == b.get("commit") or None in (a.get("commit"), b.get("commit"))
        )
    return None


def check_head(
    config: Mapping[str, Any],
    *,
    draft_hidden_size: int | None,
    target_hidden_size: int | None,
    identity: Mapping[str, Any] | None = None,
    pair_name: str | None = None,
    allow_other_pairs: bool = False,
    head: Any = "the weight head",
) -> bool | None:
    """Whether the head of `config` (its `head_config.json`, or `WeightHead.config()`) fits a pair.

    ConfigError, naming both and the fix, where its hidden sizes are not the pair's (a size unknown on
    either side is not compared), and, given the pair's `identity` (`pair.describe_pair`), where it
    records other models (`same_pair`) unless `allow_other_pairs` (then a warning). Returns the
    verdict: True (this pair), False (another pair, allowed), None (not told: no identity given; a
    head saved before identities were recorded, or one sharing nothing to compare: each with a
    warning). `head` and `pair_name` name them in messages."""
    pair = f"the pair {pair_name}" if pair_name else "the pair"
    got = {
        "draft_hidden_size": config.get("draft_hidden_size"),
        "target_hidden_size": config.get("target_hidden_size"),
    }
    want = {"draft_hidden_size": draft_hidden_size, "target_hidden_size": target_hidden_size}
    if any(got[k] is not None and want[k] is not None and int(got[k]) != int(want[k]) for k in got):
        sizes = lambda d: ", ".join(f"{k}={'unknown' if v is None else v}" for k, v in d.items())  # noqa: E731
        raise ConfigError(
            f"{head} was trained for hidden sizes ({sizes(got)}) but {pair} has ({sizes(want)}) "
            f"(head pair: {config.get('pair', 'unknown')}); train a head for this pair "
            "(python -m diversed.train with this pair and task)"
        )
    if identity is None:
        return None
    recorded = config.get("pair_identity")
    same = None if recorded is None else same_pair(recorded, dict(identity))
    theirs = f"{config.get('pair', 'unknown')} ({_models(recorded or {}, config)})"
    ours = f"{pair_name} ({_models(identity, {})})"
    if recorded is None:
        log.warning(
            f"{head} does not record which models it was trained on (saved by an older diversed; "
            f"its pair's name: {config.get('pair', 'unknown')}): cannot check it belongs to the pair {ours}"
        )
    elif same is None:
        log.warning(
            f"{head} was trained on the pair {theirs}; cannot tell whether that is the pair {ours} "
            "(the two records share nothing to compare, e.g. a Hub id on one side, "
            "weight digests on the other)"
        )
    elif not same and not allow_other_pairs:
        raise ConfigError(
            f"{head} was trained on the pair {theirs}, not on the pair being evaluated, {ours}: "
            "its weights were learnt on other models' hidden states. Train a head for this pair "
            f"(python -m diversed.train with this pair and task), or set sweep.allow_other_pair_heads=true "
            "to evaluate it anyway (its points record the pair it was trained on)"
        )
    elif not same:
        log.warning(
            f"{head} was trained on the pair {theirs}, evaluated on {ours} "
            "(sweep.allow_other_pair_heads=true)"
        )
    return same


def _models(identity: Mapping[str, Any], config: Mapping[str, Any]) -> str:
    """'target X, draft Y' from a pair's identity (paths or Hub ids), else from a head's config."""
    if "random" in identity:
        return f"random {identity['random']}, seed {identity.get('seed')}"
    name = {
        r: (identity.get(r) or {}).get("path") or (identity.get(r) or {}).get("id") or config.get(f"{r}_name")
        for r in ("target", "draft")
    }
    return f"target {name['target'] or 'unknown'}, draft {name['draft'] or 'unknown'}"


def head_metadata(directory: str | Path) -> dict[str, Any]:
    """A saved head's `head_config.json` (hidden sizes, pair, the task it was trained on, ...), or {}
    where there is none (a moved or deleted head); a damaged one is `read_config`'s error."""
    return read_config(directory) if (Path(directory) / CONFIG_NAME).is_file() else {}


def read_config(directory: str | Path) -> dict[str, Any]:
    """A saved head's `head_config.json`; MissingFile naming it where there is none or it is not
    whole JSON (cut short, damaged)."""
    path = Path(directory) / CONFIG_NAME
    if not path.is_file():
        raise MissingFile(
            f"{directory} is not a saved head (no {CONFIG_NAME}): train one first "
            "(python -m diversed.train with the same pair and task)"
        )
    try:
        config = json.loads(path.read_text())
    except (ValueError, OSError) as e:  # cut short, damaged, not UTF-8
        raise MissingFile(
            f"{path} cannot be read ({type(e).__name__}: {e}): copy the head again, or train it again"
        ) from None
    if not isinstance(config, dict):
        raise MissingFile(
            f"{path} is not a head's config (a JSON object): copy the head again, or train it again"
        )
    return config


def _entropy(p: Tensor) -> Tensor:
    """H(p) = −Σ p log p (0·log 0 = 0)."""
    return -(p * p.clamp_min(1e-30).log()).sum(dim=-1)


def check_bounds(w_bounds: Sequence[float]) -> tuple[float, float]:
    """(lo, hi) as floats; ValueError unless 0 <= lo < hi <= 1."""
    bounds = tuple(float(b) for b in w_bounds)
    if len(bounds) != 2 or not 0.0 <= bounds[0] < bounds[1] <= 1.0:
        raise ValueError(f"w_bounds={list(w_bounds)} must be [lo, hi] with 0 <= lo < hi <= 1")
    return bounds  # type: ignore[return-value]


class WeightHead(nn.Module):
    """w = lo + (hi − lo)·softmax(f([n(h_draft); n(h_target); features]))[target], f linear (the
    paper) or an MLP, n a LayerNorm without affine parameters (`normalize`) or the identity.

    The last layer starts at zero, so w = (lo + hi)/2 everywhere before training (0.5 for the
    symmetric bounds). The defaults are the paper's head: normalize=False, w_bounds=(0, 1).
    """

    def __init__(
        self,
        draft_hidden_size: int,
        target_hidden_size: int,
        hidden_sizes: Sequence[int] = (),
        features: Sequence[str] = (),
        normalize: bool = False,
        w_bounds: Sequence[float] = (0.0, 1.0),
        **metadata: Any,
    ) -> None:
        super().__init__()
        unknown = set(features) - set(FEATURES)
        if unknown:
            raise ValueError(f"unknown head features {sorted(unknown)}; choose from {FEATURES}")
        self.normalize = bool(normalize)
        self.w_bounds = check_bounds(w_bounds)
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

    def check_pair(self, target: nn.Module, draft: nn.Module) -> None:
        """ConfigError unless the models' hidden sizes are this head's (`check_head`); the engine asks
        before any model call (`DynamicEnsemble.check_pair`)."""
        from diversed.models.pair import hidden_size  # hydra-free at import: report reads heads

        check_head(
            self.config(), draft_hidden_size=hidden_size(draft), target_hidden_size=hidden_size(target)
        )

    def feature_values(self, p: Tensor, q: Tensor) -> Tensor:
        """The head's scalar features of p and q ([..., V] each), in `features`' order: [..., F]
        (what `forward(features=)` takes where p and q are not kept, e.g. cached training rows)."""
        values = {
            "entropy_p": lambda: _entropy(p),
            "entropy_q": lambda: _entropy(q),
            "tv": lambda: total_variation(p, q),
        }
        return torch.stack([values[f]() for f in self.features], dim=-1)

    def forward(
        self,
        draft_hidden: Tensor,
        target_hidden: Tensor,
        p: Tensor | None = None,
        q: Tensor | None = None,
        *,
        features: Tensor | None = None,
    ) -> Tensor:
        """w per position ([...]) from the hidden states ([..., D]); heads with `features` need p=
        and q= ([..., V]), or the features themselves (`feature_values`, [..., F])."""
        if self.normalize:  # each model's own scale gone: zero mean, unit variance per position
            draft_hidden = F.layer_norm(draft_hidden, draft_hidden.shape[-1:])
            target_hidden = F.layer_norm(target_hidden, target_hidden.shape[-1:])
        parts = [draft_hidden, target_hidden]
        if self.features:
            if features is None:
                if p is None or q is None:
                    raise ValueError(f"head features {self.features} need p= and q= (or features=)")
                features = self.feature_values(p, q)
            parts.append(features.to(draft_hidden.dtype))
        logits = self.net(torch.cat(parts, dim=-1))
        lo, hi = self.w_bounds
        # w = lo + (hi − lo)·softmax(logits)[target]: inside [lo, hi] however large the logits
        return lo + (hi - lo) * torch.softmax(logits.float(), dim=-1)[..., 0]

    # ------------------------------------------------------------------------- persistence

    def config(self) -> dict[str, Any]:
        return {
            "draft_hidden_size": self.draft_hidden_size,
            "target_hidden_size": self.target_hidden_size,
            "hidden_sizes": list(self.hidden_sizes),
            "features": list(self.features),
            "normalize": self.normalize,
            "w_bounds": list(self.w_bounds),
            **self.metadata,
        }

    def save_pretrained(self, directory: str | Path, **metadata: Any) -> Path:
        """Write `head.safetensors` and `head_config.json` (hidden sizes, pair, task, ...), each whole
        or not at all (`atomic.write_file`); NonFiniteHead, writing nothing, where a weight is NaN or
        ±inf."""
        directory = Path(directory)
        state = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in self.state_dict().items()}
        check_finite(
            state,
            f"the head to be saved to {directory}",
            "nothing was written; a head that diverged in training is trained again (a lower learning "
            "rate, optimizer.lr), from its last finite checkpoint or afresh",
        )
        self.metadata.update(metadata)
        write_file(directory / WEIGHTS_NAME, save(state))
        write_file(
            directory / CONFIG_NAME, (json.dumps(self.config(), indent=2, default=str) + "\n").encode()
        )
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
        """Load a saved head; with the pair's hidden sizes given, a mismatch is a clear error
        (`check_head`), and so are weights that are NaN or ±inf (`check_finite`)."""
        directory = Path(directory)
        config = read_config(directory)
        check_head(
            config,
            draft_hidden_size=draft_hidden_size,
            target_hidden_size=target_hidden_size,
            head=f"head {directory}",
        )
        # heads saved before these keys are the paper's head: raw hidden states, w in [0, 1]
        config.setdefault("normalize", False)
        config.setdefault("w_bounds", [0.0, 1.0])
        head = cls(**config)
        try:
            state = load_file(str(directory / WEIGHTS_NAME), device=str(map_location))
        except Exception as e:  # missing, cut short, not a safetensors file
            raise MissingFile(
                f"{directory / WEIGHTS_NAME} cannot be read ({e}): copy the head again, or train it again"
            ) from None
        check_finite(state, str(directory / WEIGHTS_NAME), NON_FINITE_FIX)
        head.load_state_dict(state)
        return head
