"""Fine-tune the DRAFT towards the frozen target, so lossless speculative decoding accepts more.

`python -m diversed.distill +experiment=distill_toy` composes `configs/distill.yaml` and calls
`distill(cfg)`: on-policy distillation in the style of DistillSpec (Zhou et al., ICLR 2024). Per
batch of the task's training prompts:
  1. completions are sampled at `temperature` from the draft (on-policy, DistillSpec's default),
     the target, or either at random per batch (`rollout: draft | target | mixed`), by the
     token-by-token loop on the engine's forward path;
  2. one no-grad forward of the target gives p_t over prompt + completion, one forward of the
     draft with gradients gives q_t;
  3. loss = the mean over completion tokens (and, with `prompt_positions`, some or all prompt
     tokens, teacher-forced) of D(p_t, q_t), logits computed at those positions only: forward KL
     Σ p log(p/q) (default), total variation ½Σ|p − q| (1 − TV is a draft token's acceptance
     probability, so this maximises acceptance directly), or reverse KL Σ q log(q/p) (`teacher.py`).
With `top_k`, p_t is kept as its top K ids over the draft's support plus the rest's mass and D is
taken between the laws coarsened so (`teacher.coarse_divergence`). With `reuse` (rollout=target
and top_k), the target's samples, which do not depend on the draft, are drawn ONCE per training
prompt when the fit starts (`sample_batch_size` prompts at a time, by length) with p_t at every
scored slot (caught from the sampling's own target forwards, `TeacherLaws`: no second forward),
kept in `<run dir>/teacher_samples.pt` (a rerun with the same examples and settings reads them)
and served as the training rows of every epoch: each epoch then costs the draft's forward and
backward alone. `replay` adds other runs' samples (another task's) to the rows.
`freeze_layers` keeps the draft's embeddings and first layers fixed (a draft cut from the target
then shares the target's bottom exactly, and its backward stops above them); with `reuse`, the
bottom's output on each sample is computed once when the fit starts and every step runs only the
layers above it (`FrozenBottom`, checked against the whole forward first).
Validation decodes held-out prompts with lossless speculative decoding and logs the acceptance
rate (`val/acceptance_rate`, also `val/objective`, which the checkpoint callback keeps the best
of). The whole draft trains by default; with `distill.lora` (r, alpha, dropout, target_modules)
only LoRA adapters train, through `peft`, merged into the weights at the end. The best draft is
saved with `save_pretrained` (safetensors) and the tokenizer in `<run dir>/draft`, loadable as
`pair.draft=<run dir>/draft` or `sweep.draft_models=[<run dir>/draft]`.

`DistillModule` is a `pair_module.PairModule` (the teacher-forced layout, the pair's plumbing, the
validation sums): the target is held outside its parameters and never in a checkpoint. The
settings are checked once, by `distill.check_distill` (`training/settings.py`), before anything
loads; the module does not check them again. It does not change the target, and it does not tune
the draft for anything but agreeing with the target.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf
from torch import Tensor, nn

from diversed.decoding import draft_vocab
from diversed.decoding.autoregressive import Step, autoregressive_generate
from diversed.decoding.stats import Totals
from diversed.decoding.verify import Lossless
from diversed.errors import ConfigError, MissingPackage
from diversed.training.pair_module import OBJECTIVE, PairModule, positions, shared_logits, teacher_forced
from diversed.training.teacher import (
    TeacherSample,
    TeacherTop,
    coarse_divergence,
    divergence,
    read_samples,
    teacher_top,
    write_samples,
)

log = logging.getLogger(__name__)


class DistillModule(PairModule):
    """The trainable draft beside the frozen target; its checkpoints hold the draft (or its LoRA
    adapters' model) and the optimizer. The settings are checked by `distill.check_distill`."""

    exported = "draft"

    def __init__(
        self,
        optimizer: Callable[..., torch.optim.Optimizer],
        *,
        pair: Any = None,
        divergence: str = "forward_kl",
        rollout: str = "draft",
        mixed_fraction: float = 0.5,
        temperature: float = 1.0,
        max_new_tokens: int | None = None,
        num_draft_tokens: int = 5,
        val_temperature: float = 1.0,
        lora: dict[str, Any] | None = None,
        prompt_positions: int = 0,
        freeze_layers: int = 0,
        top_k: int | None = None,
        reuse: bool = False,
        sample_batch_size: int = 64,
        replay: list[str] | tuple[str, ...] = (),
        lr_schedule: str = "constant",
        warmup_steps: int = 0,
    ) -> None:
        super().__init__(optimizer, pair)
        if lora is not None and not isinstance(lora, dict):  # a DictConfig from Hydra: plain, for checkpoints
            lora = OmegaConf.to_container(lora, resolve=True)
        if replay is not None and not isinstance(replay, list | tuple):
            replay = list(replay)
        self.save_hyperparameters(ignore=["pair", "optimizer"])
        self.draft = pair.draft if pair is not None else None
        if self.draft is not None:
            self.draft.train().requires_grad_(True)
            if freeze_layers:
                freeze_bottom(self.draft, freeze_layers)
            if lora:
                self.draft = with_lora(self.draft, lora)
        # distill.reuse: where the drawn samples are kept (distill() sets it)
        self.samples_file: Path | None = None

    def frozen(self) -> tuple[nn.Module, ...]:
        return (self.pair.target,)  # the draft trains

    def trainable_parameters(self) -> list[nn.Parameter]:
        return [p for p in self.draft.parameters() if p.requires_grad]

    def on_fit_start(self) -> None:
        super().on_fit_start()  # the target placed
        if self.hparams.reuse:  # before the loaders are made: the train loader serves the samples
            # under the run's precision (bf16-mixed: autocast, about half the time of an fp32 prefill on CPU)
            with self.trainer.precision_plugin.forward_context():
                samples = self.teacher_samples(self.trainer.datamodule.train_task)
            samples += [
                s
                for path in self.hparams.replay
                for s in read_samples(Path(path), draft_vocab.support(self.draft))
            ]
            if self.hparams.freeze_layers and not self.hparams.lora:  # (LoRA adapts the bottom too)
                bottom = FrozenBottom(self.draft, int(self.hparams.freeze_layers))
                with self.trainer.precision_plugin.forward_context():
                    samples = bottom.attach(samples, self.pair.tokenizer.pad_token_id)
            self.trainer.datamodule.serve(samples)

    # --------------------------------------------------------------------- training

    def rollout(
        self, task: Any, examples: list[dict], record: Callable[[Step], None] | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Completions of `examples` from the draft or the target; (sequences, prompt mask, new
        tokens). `record`: `autoregressive_generate`'s (the sampling model's laws as it decodes)."""
        hp, tok = self.hparams, self.pair.tokenizer
        ids, mask = self.prompts(task, examples)
        # (torch's generator: seeded per step, `checkpoints.StepSeeds`, so a resumed run draws the same)
        source = (
            hp.rollout
            if hp.rollout != "mixed"
            else ("draft" if float(torch.rand(())) < hp.mixed_fraction else "target")
        )
        model = self.draft if source == "draft" else self.pair.target
        out = autoregressive_generate(
            model,
            ids,
            mask,
            max_new_tokens=self.max_new_tokens(task),
            do_sample=True,
            temperature=hp.temperature,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
            stop=task.stopper(tok),
            record=record,
        )
        return out.sequences, mask, out.stats.new_tokens.to(self.device)

    def training_step(self, batch: list[dict] | list[TeacherSample], batch_idx: int) -> Tensor:
        if batch and isinstance(batch[0], TeacherSample):
            return self.step_on_samples(batch)
        hp = self.hparams
        inputs, prompt_mask, comp_mask, _, at, weight = self.rollout_inputs(self.train_task, batch)
        B = prompt_mask.shape[0]
        with torch.no_grad():
            p_logits = self.pair.target(**inputs, logits_to_keep=at).logits
        if hp.top_k is not None:  # the target's law coarsened to its top ids over the draft's support
            with draft_vocab.support_logits(self.draft) as support:
                q_logits = self.draft(**inputs, logits_to_keep=at).logits
            teacher = teacher_top(p_logits, support, hp.top_k, hp.temperature)
            d = coarse_divergence(teacher, q_logits, hp.divergence, hp.temperature)
            tv = coarse_divergence(teacher, q_logits.detach(), "tvd", hp.temperature)
        else:
            p_logits, q_logits = shared_logits(p_logits, self.draft(**inputs, logits_to_keep=at).logits)
            d = divergence(p_logits, q_logits, hp.divergence, hp.temperature)
            tv = divergence(p_logits.detach(), q_logits.detach(), "tvd", hp.temperature)
        loss = (d * weight).sum() / weight.sum().clamp_min(1)
        C = comp_mask.shape[1]  # the last C positions are the completion's: acceptance is 1 − TV there
        tv_c, m_c = tv[:, tv.shape[1] - C :], weight[:, weight.shape[1] - C :]
        self.log_dict(
            {"train/loss": loss, self._acceptance_key(): 1 - (tv_c * m_c).sum() / m_c.sum().clamp_min(1)},
            prog_bar=True,
            batch_size=B,
        )
        return loss

    def _acceptance_key(self) -> str:
        # 1 − TV of the coarsened laws is an upper bound of the acceptance (coarsening lowers TV)
        return "train/acceptance" if self.hparams.top_k is None else "train/acceptance_bound"

    # --------------------------------------------------------------------- samples drawn once (reuse)

    def step_on_samples(self, batch: list[TeacherSample]) -> Tensor:
        """The loss on samples drawn once: the draft teacher-forced on each row (right-padded), its
        support logits at the row's scored slots against the target's coarsened law stored there."""
        hp, pad = self.hparams, self.pair.tokenizer.pad_token_id
        ids, mask = right_padded([s.ids for s in batch], pad, self.device)
        width = ids.shape[1]
        with draft_vocab.support_logits(self.draft):
            if batch[0].bottom is None:
                logits = self.draft(input_ids=ids, attention_mask=mask, position_ids=positions(mask)).logits
            else:  # the frozen bottom's states, computed once: only the layers above it run
                logits = FrozenBottom(self.draft, int(hp.freeze_layers)).top(
                    padded([s.bottom for s in batch], width).to(self.device), mask
                )
        rows = torch.cat([torch.full_like(s.at, b) for b, s in enumerate(batch)])
        q_logits = logits[rows, torch.cat([s.at for s in batch])]
        teacher = TeacherTop(
            torch.cat([s.teacher.logp.float() for s in batch]),
            torch.cat([s.teacher.ids.long() for s in batch]),
            torch.cat([s.teacher.rest.float() for s in batch]),
        )  # half kept: float here
        d = coarse_divergence(teacher, q_logits, hp.divergence, hp.temperature)
        completion = torch.cat([s.at >= s.prompt - 1 for s in batch])
        tv = coarse_divergence(teacher, q_logits.detach(), "tvd", hp.temperature)[completion]
        loss = d.mean()
        self.log_dict(
            {"train/loss": loss, self._acceptance_key(): 1 - tv.mean() if tv.numel() else tv.new_ones(())},
            prog_bar=True,
            batch_size=len(batch),
        )
        return loss

    @torch.no_grad()
    def teacher_samples(self, task: Any) -> list[TeacherSample]:
        """One target sample per training example of `task`, with the target's coarsened law at its
        scored slots: read from `samples_file` when it holds these (same examples, settings, target
        and draft support), else drawn (prompts by length, `sample_batch_size` at a time) and written."""
        import hashlib
        import json

        hp, tok = self.hparams, self.pair.tokenizer
        support = draft_vocab.support(self.draft)
        key = hashlib.sha256(
            json.dumps(
                {
                    "examples": [json.dumps(e, sort_keys=True, default=str) for e in task.examples],
                    "settings": task.settings(),
                    "target": str(getattr(self.pair.target, "name_or_path", "")),
                    "support": None if support is None else support.tolist(),
                    "vocab": draft_vocab.vocab_size(self.draft),
                    **{k: hp[k] for k in ("temperature", "max_new_tokens", "prompt_positions", "top_k")},
                },
                sort_keys=True,
                default=str,
            ).encode()
        ).hexdigest()
        if self.samples_file is not None and self.samples_file.is_file():
            found = read_samples(self.samples_file, support, key)
            if found is not None:
                log.info(f"Reusing the {len(found)} target samples in {self.samples_file}")
                return found
        examples = list(task.examples)
        lengths = [len(ids) for ids in task.encode(tok, examples)]
        order = sorted(range(len(examples)), key=lengths.__getitem__)
        samples: list[TeacherSample | None] = [None] * len(examples)
        start, bs = time.perf_counter(), int(hp.sample_batch_size)
        for first in range(0, len(order), bs):
            chunk = order[first : first + bs]
            for i, sample in zip(chunk, self._draw(task, [examples[i] for i in chunk], support), strict=True):
                samples[i] = sample
            done, took = first + len(chunk), time.perf_counter() - start
            log.info(
                f"Target samples: {done}/{len(order)} ({took:.0f} s, "
                f"about {took / done * (len(order) - done):.0f} s left)"
            )
        if self.samples_file is not None:
            write_samples(self.samples_file, key, samples, support)  # type: ignore[arg-type]
        return samples  # type: ignore[return-value]

    def _draw(self, task: Any, examples: list[dict], support: Tensor | None) -> list[TeacherSample]:
        """One target sample per example with the target's coarsened law at its scored slots, all
        from the sampling's own forwards (`TeacherLaws`)."""
        hp = self.hparams
        laws = TeacherLaws(support, int(hp.top_k), hp.temperature, int(self.max_new_tokens(task)))
        inputs, prompt_mask, _, new_tokens, at, weight = self.rollout_inputs(task, examples, laws)
        sequences, (B, P) = inputs["input_ids"], prompt_mask.shape
        out = []
        for r in range(0, B, 4):  # the prompt slots' [rows, slots, V] logits a few rows at a time
            rows = torch.arange(r, min(r + 4, B), device=at.device)
            top = laws.at(rows, at, P)
            for j, b in enumerate(rows.tolist()):
                prompt_len, left = int(prompt_mask[b].sum()), P - int(prompt_mask[b].sum())  # left padding
                keep = weight[b] > 0
                out.append(
                    TeacherSample(
                        sequences[b, left : P + int(new_tokens[b])].cpu(),
                        prompt_len,
                        (at[keep] - left).cpu(),
                        TeacherTop(
                            top.logp[j][keep].half().cpu(),
                            top.ids[j][keep].int().cpu(),
                            top.rest[j][keep].half().cpu(),
                        ),
                    )
                )
        return out

    def rollout_inputs(
        self, task: Any, examples: list[dict], record: Callable[[Step], None] | None = None
    ) -> tuple[dict[str, Tensor], Tensor, Tensor, Tensor, Tensor, Tensor]:
        """Roll `examples` out (`rollout`, with `record`) and lay the rows out for a teacher-forced
        forward: (inputs {input_ids, attention_mask, position_ids}, prompt_mask [B, P], comp_mask
        [B, C], new_tokens [B], and the scored slots with their weights, `scored_positions`)."""
        sequences, prompt_mask, new_tokens = self.rollout(task, examples, record)
        inputs, comp_mask = teacher_forced(sequences, prompt_mask, new_tokens)
        # The positions whose next token is scored: every completion token, and (prompt_positions)
        # some or all of the prompt's own tokens, teacher-forced text the target also predicts.
        # Only their logits are computed (the LM head over every position is most of a small draft).
        at, weight = self.scored_positions(prompt_mask, comp_mask)
        return inputs, prompt_mask, comp_mask, new_tokens, at, weight

    def scored_positions(self, prompt_mask: Tensor, comp_mask: Tensor) -> tuple[Tensor, Tensor]:
        """(positions, weight [B, len(positions)]): the slots whose logits predict a completion
        token (P − 1 .. P + C − 2), after `prompt_positions` slots predicting a prompt token (all
        with -1; drawn at random per step otherwise), each weighted 1 where it predicts text."""
        P, C = prompt_mask.shape[1], comp_mask.shape[1]
        comp = torch.arange(P - 1, P + C - 1, device=self.device)
        k = int(self.hparams.prompt_positions)
        prompt = torch.arange(P - 1 if k else 0, device=self.device)
        if 0 < k < P - 1:  # (k = 0 draws nothing: the random state is the rollouts' alone)
            prompt = prompt[torch.randperm(P - 1, device=self.device)[:k]].sort().values
        at = torch.cat([prompt, comp])
        # slot i predicts the token in slot i + 1: it counts where both hold text
        text = torch.cat([prompt_mask.bool(), comp_mask], 1)
        weight = (text[:, at] & text[:, at + 1]).float()
        return at, weight

    # --------------------------------------------------------------------- validation and export

    def validation_step(self, batch: list[dict], batch_idx: int) -> None:
        hp = self.hparams
        out, _, _ = self.speculative(
            self.val_task,
            batch,
            self.draft,
            Lossless(),
            do_sample=hp.val_temperature > 0,
            temperature=hp.val_temperature or 1.0,
            generator=torch.Generator(device=self.device).manual_seed(batch_idx),
        )
        self.add_validation(out.stats)

    def validation_metrics(self, totals: Totals, score: float | None) -> dict[str, float]:
        if totals.proposed == 0:
            return {}
        return {**self.decoding_metrics(totals), OBJECTIVE: totals.acceptance_rate}

    def export(self, directory: Path, checkpoint: str) -> None:
        """The draft, LoRA adapters merged (safetensors; a restricted head kept apart), and the tokenizer."""
        draft = merged(self.draft).eval().requires_grad_(False)
        draft_vocab.save_pretrained(draft, directory, safe_serialization=True)
        self.pair.tokenizer.save_pretrained(directory)


class TeacherLaws:
    """The target's coarsened law (`teacher_top`) at a sample's scored slots, caught from the
    sampling's own forwards (`autoregressive_generate(..., record=laws)`) instead of a second
    forward over prompt + completion.

    Slot s of a row predicts the token in slot s + 1. With P the padded prompt width:
      completion slot P − 1 + t (t ≥ 0): softmax(logits / T) of decoding step t, whose token the
        target drew from it; reduced to its top K at once ([B, max_new_tokens, K] kept);
      prompt slot i < P − 1: softmax(head(h_i) / T), h_i the prefill's final hidden state at
        slot i (kept, [B, P, H]); the head is applied in `at` to the scored slots alone, a few
        rows at a time ([rows, slots, V] logits: all of them would be 4 GB for 64 rows × 320 slots).
    The same laws as that second forward up to rounding (another batch shape and, for the
    completion, an incremental forward over the KV cache).
    """

    def __init__(self, support: Tensor | None, k: int, temperature: float, max_new_tokens: int) -> None:
        self.support, self.k, self.temperature, self.max_new = support, k, temperature, max_new_tokens
        self.top: TeacherTop | None = None  # completion slots: [B, max_new, K], [B, max_new, K], [B, max_new]
        self.prompt: Tensor | None = None  # [B, P, H]
        self.head: Callable[[Tensor], Tensor] | None = None

    def __call__(self, step: Step) -> None:
        top = teacher_top(step.logits, self.support, self.k, self.temperature)
        if step.prompt is not None:
            self.prompt, self.head = step.prompt, step.head
            B = step.prompt.shape[0]
            self.top = TeacherTop(
                top.logp.new_zeros(B, self.max_new, top.logp.shape[-1]),
                top.ids.new_zeros(B, self.max_new, top.ids.shape[-1]),
                top.rest.new_zeros(B, self.max_new),
            )
        for kept, new in zip(self.top, top, strict=True):
            kept[step.rows, step.step] = new

    def at(self, rows: Tensor, at: Tensor, P: int) -> TeacherTop:
        """The laws of `rows` at slots `at` ([S], sorted: prompt slots < P − 1, then completion
        slots P − 1 + t up to the steps decoded): [len(rows), S, K], [len(rows), S, K], [len(rows), S]."""
        first = int((at < P - 1).sum())  # the prompt slots come first
        comp = at[first:] - (P - 1)  # decoding step t (past a row's end: garbage, not scored)
        parts = [TeacherTop(*(t[rows][:, comp] for t in self.top))]
        if first:
            logits = self.head(self.prompt[rows][:, at[:first]])
            parts.insert(0, teacher_top(logits, self.support, self.k, self.temperature))
        return TeacherTop(*(torch.cat(ts, 1) for ts in zip(*parts, strict=True)))


class FrozenBottom:
    """A draft whose embeddings and first `layers` decoder layers are frozen (`freeze_bottom`) maps a
    row to the same hidden states after them in every epoch: `attach` computes them once per sample
    (no grad, under the caller's precision context, as the training forward would) and `top` runs
    the layers above on them. The training forward then skips the bottom: on SmolLM2's 15-layer
    draft with 8 frozen, 8 of about 37 layer-forward equivalents of a step (the top's forward and
    backward, the head's over every slot).

    The layers are cut by `layers_between` (the base model's layer list and the config's layer count
    and types swapped for the call), which holds for models whose forward is "embeddings, layers,
    norm" (Llama, Mistral, Qwen, Gemma-3, whose embedding module itself scales); `attach` checks it
    on two samples (the logits through `top` against the whole forward, in training mode, so dropout
    shows too) and otherwise keeps the whole forward, saying why."""

    def __init__(self, model: nn.Module, layers: int) -> None:
        self.model, self.layers = model, layers

    @torch.no_grad()
    def states(self, ids: Tensor, mask: Tensor) -> Tensor:
        """[B, W, H]: the hidden states after the bottom of right-padded rows `ids` ([B, W])."""
        kept: list[Tensor] = []

        def catch(module: nn.Module, args: Any, out: Any) -> None:
            kept.append(out[0] if isinstance(out, tuple) else out)

        hook = self.model.base_model.layers[self.layers - 1].register_forward_hook(catch)
        try:
            with layers_between(self.model, 0, self.layers):
                self.model.base_model(
                    input_ids=ids, attention_mask=mask, position_ids=positions(mask), use_cache=False
                )
        finally:
            hook.remove()
        return kept[-1]

    def top(self, states: Tensor, mask: Tensor) -> Tensor:
        """The logits of rows whose bottom states are `states` ([B, W, H], right-padded as `mask`)."""
        with layers_between(self.model, self.layers, None):
            return self.model(
                inputs_embeds=states, attention_mask=mask, position_ids=positions(mask), use_cache=False
            ).logits

    def attach(self, samples: list[TeacherSample], pad: int, batch: int = 16) -> list[TeacherSample]:
        """`samples` with their bottom states (`bottom`), or as they are (logged) where `top` does not
        give the whole forward's logits on this model."""
        why = self.check(samples[:2], pad)
        if why:
            log.warning(f"distill.freeze_layers: the frozen bottom is run at every step ({why})")
            return samples
        start, out = time.perf_counter(), list(samples)
        order = sorted(range(len(samples)), key=lambda i: len(samples[i].ids))
        for first in range(0, len(order), batch):
            chunk = order[first : first + batch]
            ids, mask = right_padded([samples[i].ids for i in chunk], pad, self.device)
            h = self.states(ids, mask)
            for j, i in enumerate(chunk):
                out[i] = samples[i]._replace(bottom=h[j, : len(samples[i].ids)].cpu())
        log.info(
            f"distill.freeze_layers={self.layers}: the frozen bottom's states of {len(out)} samples "
            f"computed once ({time.perf_counter() - start:.0f} s); each step runs the layers above it"
        )
        return out

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def check(self, samples: list[TeacherSample], pad: int) -> str | None:
        """None if `top` on the bottom's states gives the whole forward's logits on `samples` (to
        `forward.py`'s tolerance: 5e-5 of their scale in float32, 0.1 in half precision), else why not."""
        if not samples:
            return "no samples"
        ids, mask = right_padded([s.ids for s in samples], pad, self.device)
        try:
            with torch.no_grad(), draft_vocab.support_logits(self.model):
                whole = self.model(input_ids=ids, attention_mask=mask, position_ids=positions(mask)).logits
                cut = self.top(self.states(ids, mask), mask)
        except Exception as e:  # a model laid out otherwise
            return f"running the layers above the bottom alone raised {type(e).__name__}: {e}"
        text = mask.bool()
        a, b = cut[text].float(), whole[text].float()
        gap = float(torch.where(a == b, 0.0, a - b).abs().max())
        rel = gap / max(1.0, float(b.nan_to_num(0, 0, 0).abs().max()))
        tol = 5e-5 if whole.dtype == torch.float32 and not torch.is_autocast_enabled(ids.device.type) else 0.1
        if not rel <= tol:
            return (
                f"the layers above the bottom alone differ from the whole forward by {rel:.2g} of the "
                "logits' scale"
            )
        return None


@contextmanager
def layers_between(model: nn.Module, start: int, stop: int | None) -> Iterator[nn.Module]:
    """`model` with decoder layers `start:stop` alone (its base model's layer list, and the config's
    layer count and per-layer types, swapped for the block): called with `inputs_embeds`, the
    hidden states after layer `start`, it runs those layers, the final norm and the head."""
    base, config = model.base_model, model.config
    stack, count, types = base.layers, config.num_hidden_layers, getattr(config, "layer_types", None)
    kept = list(stack)[start:stop]
    base.layers = nn.ModuleList(kept)
    config.num_hidden_layers = len(kept)
    if types:
        config.layer_types = list(types)[start:stop]
    try:
        yield model
    finally:
        base.layers, config.num_hidden_layers = stack, count
        if types:
            config.layer_types = types


def right_padded(rows: list[Tensor], pad: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """(ids [B, W], mask [B, W]) of token rows padded on the right with `pad`."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long, device=device)
    mask = torch.zeros_like(ids)
    for b, r in enumerate(rows):
        ids[b, : len(r)], mask[b, : len(r)] = r, 1
    return ids, mask


def padded(rows: list[Tensor], width: int) -> Tensor:
    """[B, width, H]: rows of [L, H] states, zeros on the right."""
    out = rows[0].new_zeros(len(rows), width, rows[0].shape[-1])
    for b, r in enumerate(rows):
        out[b, : len(r)] = r
    return out


def freeze_bottom(model: nn.Module, layers: int) -> None:
    """Keep `model`'s input embeddings and first `layers` decoder layers as they are (a draft cut
    from the target then computes exactly the target's first layers; its backward stops above
    them). A head tied to the embeddings stays fixed with them."""
    stack = model.base_model.layers
    if not 0 <= layers <= len(stack):
        raise ConfigError(f"distill.freeze_layers={layers}: the draft has {len(stack)} decoder layers")
    model.get_input_embeddings().requires_grad_(False)
    for layer in list(stack)[:layers]:
        layer.requires_grad_(False)


def with_lora(model: nn.Module, lora: dict[str, Any]) -> nn.Module:
    """`model` with LoRA adapters (peft) on `lora["target_modules"]`; only the adapters train."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise MissingPackage(
            "distill.lora needs peft: pip install peft (or pip install 'diversed[lora]')"
        ) from None
    config = LoraConfig(
        r=int(lora.get("r", 16)),
        lora_alpha=int(lora.get("alpha", 32)),
        lora_dropout=float(lora.get("dropout", 0.0)),
        target_modules=list(lora.get("target_modules", ("q_proj", "k_proj", "v_proj", "o_proj"))),
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)


def merged(model: nn.Module) -> nn.Module:
    """The plain model: LoRA adapters merged into its weights (a plain model as it is)."""
    return model.merge_and_unload() if hasattr(model, "merge_and_unload") else model
