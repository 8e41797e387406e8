"""A draft that proposes from a restricted vocabulary: q(x) = 0 outside its K most frequent tokens.

On a small real model the LM head is most of a draft's forward (SmolLM2: 49,152 × 576, about 5 ms
of a 4-layer draft's 9 ms per token on 2 CPU cores); a head over the K tokens that make up most
of the text costs K / V of that (frequency-ranked drafting). `DraftVocabHead` replaces a draft's
LM head: it computes logits for its K rows only and scatters them into a full-vocabulary row
whose other entries are −inf, so softmax gives q(x) = 0 there EXACTLY and every caller (the
engine, the verifiers, training) sees the usual [..., V] logits. A draft never proposes a token
outside its vocabulary; lossless verification stays exact (the target's residual max(0, p − q)
puts p's mass outside back), it only accepts less where p has mass there.

Files: the model is saved as usual (its tied or full LM head untouched); the restricted head is
`draft_vocab.safetensors` beside it (`weight` [K, H], `index` [K]), which `attach` puts back on
load (`pair.load_pair` does, for both models). `rank_tokens` picks the K most frequent ids of
a corpus (special tokens always in, and optionally the ids of some texts, e.g. a model's own
completions, ahead of the rest); `support_logits` gives the K logits alone (for training).

It does not choose K or train the head (`drafts.py` and `distill.py` do).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

FILE = "draft_vocab.safetensors"


class DraftVocabHead(nn.Linear):
    """logits[..., index] = h Wᵀ (+ b) for the K rows of W; −inf at every other of the V ids.

    A `nn.Linear` with K outputs (its weight is [K, H]), so code that asks for the output
    embeddings still finds a linear layer; `vocab` is the full vocabulary V the logits span."""

    def __init__(self, weight: Tensor, index: Tensor, vocab: int, bias: Tensor | None = None) -> None:
        k, h = weight.shape
        check_index(index, k, vocab)
        super().__init__(h, k, bias=bias is not None, device=weight.device, dtype=weight.dtype)
        with torch.no_grad():
            self.weight.copy_(weight)
            if bias is not None:
                self.bias.copy_(bias)
        self.register_buffer("index", index.to(weight.device, torch.long))
        self.vocab = int(vocab)
        self.support_only = False  # `support_logits` sets it: the K logits alone
        self.project: nn.Module | None = None  # the K-row product if not h Wᵀ + b (quantize.py: int8)

    def forward(self, h: Tensor) -> Tensor:
        small = super().forward(h) if self.project is None else self.project(h)  # [..., K]
        if self.support_only:
            return small
        out = small.new_full((*small.shape[:-1], self.vocab), float("-inf"))
        return out.index_copy(-1, self.index, small)  # q = softmax: exactly 0 outside `index`

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, vocab={self.vocab}"


def support(model: nn.Module) -> Tensor | None:
    """The ids a draft can propose (its restricted head's `index`), or None: every id."""
    head = model.get_output_embeddings()
    return head.index if isinstance(head, DraftVocabHead) else None


@contextmanager
def support_logits(model: nn.Module) -> Iterator[Tensor | None]:
    """Within the block, a restricted draft's logits are its K support logits only ([..., K], in
    the order of the yielded `index`), not the [..., V] row with −inf elsewhere: what training
    needs (a [B, T, V] row is most of a small draft's memory and time). A model with a plain head
    is unchanged and yields None (its support is the whole vocabulary)."""
    head = model.get_output_embeddings()
    if not isinstance(head, DraftVocabHead):
        yield None
        return
    head.support_only = True
    try:
        yield head.index
    finally:
        head.support_only = False


def check_index(index: Tensor, k: int, vocab: int) -> None:
    """ValueError unless `index` holds `k` distinct ids in [0, vocab)."""
    if index.shape != (k,) or k == 0 or int(index.max()) >= vocab or int(index.min()) < 0:
        raise ValueError(
            f"a draft vocabulary needs {k} distinct ids below {vocab}, got shape {tuple(index.shape)}"
        )
    if torch.unique(index).numel() != k:
        raise ValueError("a draft vocabulary's ids must be distinct")


def vocab_size(model: nn.Module) -> int:
    """The number of ids a model's logits span (a restricted head spans the full vocabulary)."""
    head = model.get_output_embeddings()
    return int(getattr(head, "vocab", head.weight.shape[0]))


def restrict(model: nn.Module, index: Tensor | Iterable[int]) -> nn.Module:
    """Give `model` a `DraftVocabHead` over `index`, its rows copied from the current LM head."""
    index = torch.as_tensor(list(index) if not isinstance(index, Tensor) else index, dtype=torch.long)
    head = model.get_output_embeddings()
    vocab = vocab_size(model)
    full = head.weight.detach()
    if isinstance(head, DraftVocabHead):  # once only: restrict a copy of the original to change K
        raise ValueError("this model's head is restricted already")
    check_index(index, index.numel(), vocab)  # before the rows are looked up (a negative id would wrap)
    bias = head.bias.detach()[index].clone() if head.bias is not None else None
    model.set_output_embeddings(DraftVocabHead(full[index.to(full.device)].clone(), index, vocab, bias))
    model.config.tie_word_embeddings = False  # the head is its own now (the embeddings stay as they are)
    return model


def save(model: nn.Module, directory: str | Path) -> bool:
    """Write `draft_vocab.safetensors` if `model` has a restricted head; returns whether it has."""
    from safetensors.torch import save_file

    head = model.get_output_embeddings()
    if not isinstance(head, DraftVocabHead):
        return False
    tensors = {"weight": head.weight.detach().contiguous().cpu(), "index": head.index.cpu()}
    if head.bias is not None:
        tensors["bias"] = head.bias.detach().cpu()
    save_file(tensors, str(Path(directory) / FILE), metadata={"vocab": str(head.vocab)})
    return True


def save_pretrained(model: nn.Module, directory: str | Path, **kwargs: Any) -> None:
    """`model.save_pretrained` with a restricted head kept apart: the model's files hold a plain
    full head (the embeddings' rows where they are tied) so that any loader reads them, and the
    restricted head goes to `draft_vocab.safetensors`."""
    head = model.get_output_embeddings()
    if not isinstance(head, DraftVocabHead):
        model.save_pretrained(directory, **kwargs)
        return
    embed = model.get_input_embeddings()
    plain = nn.Linear(
        head.in_features, head.vocab, bias=False, device=head.weight.device, dtype=head.weight.dtype
    )
    plain.weight = embed.weight  # a stand-in the files can hold (tied to the embeddings again)
    model.set_output_embeddings(plain)
    model.config.tie_word_embeddings = True
    try:
        model.save_pretrained(directory, **kwargs)
    finally:
        model.set_output_embeddings(head)
        model.config.tie_word_embeddings = False
    save(model, directory)


def attach(model: nn.Module, directory: str | Path) -> nn.Module:
    """Put the restricted head saved in `directory` (if any) on `model`; the model as it is otherwise."""
    from safetensors import safe_open

    path = Path(directory) / FILE
    if not path.is_file():
        return model
    with safe_open(str(path), framework="pt") as f:
        vocab = int(f.metadata()["vocab"])
        weight, index = f.get_tensor("weight"), f.get_tensor("index")
        bias = f.get_tensor("bias") if "bias" in f.keys() else None
    ref = model.get_input_embeddings().weight
    to = lambda t: None if t is None else t.to(ref.device, ref.dtype)  # noqa: E731
    model.set_output_embeddings(DraftVocabHead(to(weight), index, vocab, to(bias)))
    model.config.tie_word_embeddings = False
    return model


def rank_tokens(
    token_lists: Iterable[Iterable[int]],
    k: int,
    vocab: int,
    always: Iterable[int] = (),
    first: Iterable[Iterable[int]] = (),
) -> Tensor:
    """The `k` ids a draft keeps, sorted: `always` (in the order given), then every id of `first` by
    its frequency there (e.g. what a model writes itself: a corpus of raw texts misses an instruct
    model's markdown fences), then the most frequent ids of `token_lists`; ties by id."""

    def counts_of(lists: Iterable[Iterable[int]]) -> Tensor:
        counts = torch.zeros(vocab, dtype=torch.long)
        for ids in lists:
            ids = torch.as_tensor(list(ids), dtype=torch.long)
            counts += torch.bincount(ids[(ids >= 0) & (ids < vocab)], minlength=vocab)
        return counts

    counts = counts_of(token_lists)
    ahead = counts_of(first)
    # an id of `first` ranks above every id of `token_lists` alone: score = ahead · (Σ counts + 1) + counts
    score = ahead * (int(counts.sum()) + 1) + counts
    keep = [i for i in dict.fromkeys(int(i) for i in always) if 0 <= i < vocab][: max(k, 0)]
    score[keep] = -1  # taken already
    rest = torch.argsort(-score, stable=True)[: max(0, min(k, vocab) - len(keep))]  # k ≥ V: every id once
    return torch.tensor(sorted(keep + rest.tolist()), dtype=torch.long)
