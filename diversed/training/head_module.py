"""The DIVERSED head's Lightning module: REINFORCE on the task reward plus an acceptance regulariser.

`python -m diversed.train +experiment=toy` (`diversed/train.py`) composes `configs/train.yaml` and fits it.

Per batch of prompts (each repeated K times):
  1. rollout: sample completions from v with the current head, through the engine with
     `DynamicEnsemble` and `bonus_token="ensemble"`, so every token is exactly v-distributed
     (on-policy);
  2. one no-grad forward of each frozen model over prompt + completion, teacher-forced
     (`pair_module.teacher_forced`), gives p_t, q_t and both last hidden states; only the head
     runs with grad: w_t = head(h_draft_t, h_target_t);
  3. loss = −mean[(R − b)·Σ_t log v_t(x_t)] + λ·mean[Σ_t w_t·TV(p_t, q_t)] (`reinforce.py`: the
     objective, its baselines b and its fixed or adaptive λ), where
     log v_t(x_t) = log(w_t·p_t(x_t) + (1 − w_t)·q_t(x_t)), TV(q_t, v_t) = w_t·TV(p_t, q_t)
     (1 − TV(q_t, v_t) is the acceptance probability of a draft token at t).

`DiversedModule` is a `pair_module.PairModule`: the frozen pair is held outside its parameters and
state dict (checkpoints hold the head, the baseline and the optimizer only), and validation decodes
held-out prompts with the current head and logs the task score, acceptance and
`val/objective` = score + λ·acceptance. A head whose weights go NaN or ±inf (a diverged step) stops
the run with `heads.NonFiniteHead`, naming the step and each such tensor, before any checkpoint or
the export holds it (`check_finite_head`: after every step, the teacher-forced stage's too, and
before every checkpoint). The settings are checked once, by `train.check_train` (`training/settings.py`),
before anything loads; the module does not check them again, except `reward`, a metric's name,
which only the task knows: a name the task does not compute fails at the first batch, naming the
ones it does. Distribution, precision and devices are Lightning's; nothing here launches processes
or moves gradients by hand.

The reward R (`reward`): `score`, the task's headline metric (`task.reward_batch`); any other metric
the task computes (`task.metrics_batch`, e.g. `rougeL` for a denser signal than ROUGE-2); or `mean`,
the mean of all of them.

The teacher-forced stage (`teacher_forced_steps` > 0), once before REINFORCE's first step (a run
resumed from a checkpoint that took it does not take it again; the checkpoint records it): each
train row's prompt + reference (`task.target`, cut at `max_new_tokens`, then EOS) goes once through
both frozen models (`score_tokens`), and per reference token h_draft, h_target, the head's
features, p(y*), q(y*) and TV(p, q) are kept on the CPU; then `teacher_forced_steps` steps of a
fresh optimizer (the run's, at `teacher_forced_lr` if set) on the head alone minimise
`reinforce.teacher_forced_loss` over minibatches of `data.batch_size` rows (drawn by the data's
seed), with λ = `reg_scale` as it is (reg_mode=adaptive scales λ by a policy gradient the stage
does not have). Its loss and mean w are logged as `teacher_forced/*` (at the stage's own steps) and to the
console. The cached hidden states take rows × tokens × (both hidden sizes) floats of memory. Under
DDP every process computes every row and takes the same steps (its gradients are not averaged).

`objective=teacher_forced` makes that loss the run's own: each of `trainer.max_steps` steps (the run's
optimizer, schedule, clipping, validation, checkpoints and export, as REINFORCE's) takes
`data.batch_size` cached rows drawn by the step's seeded generator; no rollout, no reward. The dense
signal where a task's reward is mostly 0 over the few REINFORCE steps a CPU affords (there, λ alone
moved w); `teacher_forced_steps` before it is allowed and adds nothing but steps."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pad_sequence

from diversed.decoding.inputs import left_pad
from diversed.decoding.stats import Totals
from diversed.decoding.stopping import decode_completions
from diversed.decoding.verify import DynamicEnsemble, probs_from_logits, run_head, total_variation
from diversed.errors import ConfigError
from diversed.models.heads import check_finite, pair_record
from diversed.models.pair import hidden_size
from diversed.training.pair_module import OBJECTIVE, PairModule, shared_logits, teacher_forced
from diversed.training.reinforce import advantage, regularised_loss, teacher_forced_loss

log = logging.getLogger(__name__)

TEACHER_FORCED_KEY = "teacher_forced_steps_done"  # in a checkpoint: the stage's steps it took
HEAD_FORM_KEY = "head_form"  # in a checkpoint: the head's normalize and w_bounds, which its weights assume


class DiversedModule(PairModule):
    """The trainable head beside a frozen (target, draft) pair; its checkpoints hold the head, the
    running baseline and the optimizer. The settings are checked by `train.check_train`."""

    exported = "head"

    def __init__(
        self,
        head: nn.Module,
        optimizer: Callable[..., torch.optim.Optimizer],
        *,
        pair: Any = None,
        reg_scale: float = 0.1,
        reg_mode: str = "fixed",
        baseline: str = "running",
        baseline_momentum: float = 0.9,
        baseline_constant: float = 1.0,
        lr_schedule: str = "constant",
        warmup_steps: int = 0,
        num_samples: int = 1,
        do_sample: bool = True,
        temperature: float = 1.0,
        num_draft_tokens: int = 5,
        max_new_tokens: int | None = None,
        normalize_advantage: bool = False,
        val_do_sample: bool = False,
        val_temperature: float = 1.0,
        reward: str = "score",
        teacher_forced_steps: int = 0,
        teacher_forced_lr: float | None = None,
        objective: str = "reinforce",
    ) -> None:
        super().__init__(optimizer, pair)
        self.save_hyperparameters(ignore=["head", "pair", "optimizer"])
        self.head = head
        self.register_buffer("baseline_value", torch.zeros(()))
        self.register_buffer("baseline_steps", torch.zeros((), dtype=torch.long))
        # not a buffer: checkpoints saved before the stage existed load strictly as they were
        self.teacher_forced_done = 0
        self._teacher_forced_cache: list[dict[str, Tensor]] | None = None  # teacher_forced_cache()

    def trainable_parameters(self) -> Iterator[nn.Parameter]:
        return self.head.parameters()

    # --------------------------------------------------------------------- rollout and scoring

    def rollout(self, task: Any, examples: list[dict], *, do_sample: bool, temperature: float):
        """Decode `examples` with the engine and the current head; returns (output, prompt mask,
        completions)."""
        out, ids, mask = self.speculative(
            task,
            examples,
            self.pair.draft,
            DynamicEnsemble(self.head),
            do_sample=do_sample,
            temperature=temperature,
            bonus_token="ensemble",
        )
        return (
            out,
            mask,
            decode_completions(self.pair.tokenizer, out.sequences, ids.shape[1], out.stats.new_tokens),
        )

    @torch.no_grad()
    def score_tokens(self, sequences: Tensor, prompt_mask: Tensor, new_tokens: Tensor, temperature: float):
        """One no-grad forward per model over prompt + completion: p_t(x_t), q_t(x_t), TV, hidden states."""
        inputs, comp_mask = teacher_forced(sequences, prompt_mask, new_tokens)
        P = prompt_mask.shape[1]
        x = sequences[:, P:]
        outs = []
        for model in (self.pair.target, self.pair.draft):
            o = model(**inputs, output_hidden_states=True)
            # logits at P−1 .. P+T−2 predict the completion tokens
            outs.append((o.logits[:, P - 1 : -1], o.hidden_states[-1][:, P - 1 : -1]))
        (lp, h_t), (lq, h_d) = outs
        lp, lq = shared_logits(lp, lq)
        p, q = probs_from_logits(lp, temperature), probs_from_logits(lq, temperature)
        p_x, q_x = p.gather(-1, x.unsqueeze(-1)).squeeze(-1), q.gather(-1, x.unsqueeze(-1)).squeeze(-1)
        extra = {"p": p, "q": q} if getattr(self.head, "uses_distributions", False) else None
        return p_x, q_x, total_variation(p, q), h_d, h_t, comp_mask, extra

    # --------------------------------------------------------------------- the teacher-forced stage

    def on_train_start(self) -> None:
        # after a resumed checkpoint is restored (on_fit_start may come before, e.g. under FSDP)
        if self.hparams.teacher_forced_steps and not self.teacher_forced_done:
            self.teacher_forced_stage()
        if self.hparams.objective == "teacher_forced":
            self.teacher_forced_cache()  # before the first step: its time is the run's start, not a step's

    def head_form(self) -> dict[str, Any]:
        """What the head's weights assume beyond their shapes (a checkpoint's shapes do not tell)."""
        return {
            "normalize": bool(getattr(self.head, "normalize", False)),
            "w_bounds": [float(b) for b in getattr(self.head, "w_bounds", (0.0, 1.0))],
        }

    def check_finite_head(self, when: str) -> None:
        """NonFiniteHead, naming each tensor of the head that holds NaN or ±inf, where one does after
        `when`: the run stops there, before a checkpoint or the export holds such weights."""
        check_finite(
            self.head.state_dict(),
            f"the head after {when}",
            "its training diverged, and the run stops before a checkpoint or the export holds it (the "
            "checkpoints written before are finite). Lower the learning rate (optimizer.lr) or "
            "model.reg_scale, then resume from the run's last checkpoint "
            "(ckpt_path=<run dir>/checkpoints/last.ckpt) or start afresh (ckpt_path=null)",
        )

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.check_finite_head(f"training step {self.global_step}")

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.check_finite_head(f"training step {self.global_step}")  # a checkpoint never holds it
        checkpoint[TEACHER_FORCED_KEY] = self.teacher_forced_done
        checkpoint[HEAD_FORM_KEY] = self.head_form()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """The stage's record, and a refusal of a head set up otherwise than the checkpoint's (a
        checkpoint saved before these settings holds the paper's head: normalize=false, w_bounds=[0, 1])."""
        self.teacher_forced_done = int(checkpoint.get(TEACHER_FORCED_KEY, 0))
        saved = checkpoint.get(HEAD_FORM_KEY, {"normalize": False, "w_bounds": [0.0, 1.0]})
        if saved != self.head_form():
            raise ConfigError(
                f"the checkpoint's head was trained with head.normalize={str(saved['normalize']).lower()} "
                f"head.w_bounds={saved['w_bounds']}, this run's has "
                f"head.normalize={str(self.head_form()['normalize']).lower()} "
                f"head.w_bounds={self.head_form()['w_bounds']}: its weights mean another w. Resume with "
                "the checkpoint's settings, or ckpt_path=null to start afresh"
            )

    @torch.no_grad()
    def teacher_forced_rows(
        self, task: Any, examples: list[dict], batch_size: int
    ) -> list[dict[str, Tensor]]:
        """Per example, over its reference's tokens (`task.target`, at most `max_new_tokens` with
        EOS): h_d, h_t and the head's features in the head's dtype, p_y, q_y, tv in float32, on the
        CPU; the frozen models run `batch_size` examples at a time. Empty references are left out."""
        tok, hp = self.pair.tokenizer, self.hparams
        temperature = hp.temperature if hp.do_sample else 1.0
        cap = self.max_new_tokens(task)
        eos = [] if tok.eos_token_id is None else [tok.eos_token_id]
        dtype = next(self.head.parameters()).dtype
        rows = []
        for start in range(0, len(examples), batch_size):
            chunk = examples[start : start + batch_size]
            refs = [(tok(task.target(e), add_special_tokens=False)["input_ids"] + eos)[:cap] for e in chunk]
            ids, mask = left_pad(task.encode(tok, chunk), tok.pad_token_id, self.device)
            completion = torch.full((len(chunk), max(map(len, refs))), tok.pad_token_id, dtype=torch.long)
            for i, r in enumerate(refs):
                completion[i, : len(r)] = torch.tensor(r, dtype=torch.long)
            new = torch.tensor([len(r) for r in refs], device=self.device)
            p_y, q_y, tv, h_d, h_t, _, extra = self.score_tokens(
                torch.cat([ids, completion.to(self.device)], 1), mask, new, temperature
            )
            features = self.head.feature_values(extra["p"], extra["q"]) if extra else None
            for i, n in enumerate(new.tolist()):
                if n == 0:
                    continue
                row = {"h_d": h_d[i, :n], "h_t": h_t[i, :n]} | (
                    {"features": features[i, :n]} if features is not None else {}
                )
                rows.append(
                    {k: v.to("cpu", dtype) for k, v in row.items()}
                    | {
                        k: v[i, :n].to("cpu", torch.float32)
                        for k, v in (("p_y", p_y), ("q_y", q_y), ("tv", tv))
                    }
                )
        return rows

    def teacher_forced_cache(self) -> list[dict[str, Tensor]]:
        """The train rows' cached features (`teacher_forced_rows`), computed once per run (a resumed run
        computes them again: they are not in its checkpoint)."""
        if self._teacher_forced_cache is None:
            size = int(getattr(self.trainer.datamodule, "batch_size", 16))
            self._teacher_forced_cache = self.teacher_forced_rows(
                self.train_task, list(self.train_task), size
            )
        return self._teacher_forced_cache

    def teacher_forced_batch(self, batch: list[dict[str, Tensor]]) -> dict[str, Tensor]:
        """`teacher_forced_loss` over cached rows `batch`, with grad through the head: loss, nll, reg,
        and (detached) the mean w and the acceptance E_t[1 − w_t·TV_t] over their reference tokens."""
        pad = {k: pad_sequence([r[k] for r in batch], batch_first=True).to(self.device) for k in batch[0]}
        mask = pad_sequence([torch.ones(len(r["p_y"]), dtype=torch.bool) for r in batch], batch_first=True)
        mask = mask.to(self.device)
        w = self.head(pad["h_d"], pad["h_t"], features=pad.get("features")).float()
        loss, nll, reg = teacher_forced_loss(
            w, pad["p_y"], pad["q_y"], pad["tv"], mask, self.hparams.reg_scale
        )
        n = mask.sum().clamp_min(1)
        return {
            "loss": loss,
            "nll": nll.detach(),
            "reg": reg.detach(),
            "mean_w": (w.detach() * mask).sum() / n,
            "acceptance": 1 - (w.detach() * pad["tv"] * mask).sum() / n,
        }

    def teacher_forced_stage(self) -> None:
        """`teacher_forced_steps` steps of a fresh optimizer on the head alone, minimising
        `teacher_forced_loss` over minibatches of the train rows' cached features."""
        hp = self.hparams
        data = self.trainer.datamodule
        size = int(getattr(data, "batch_size", 16))
        rows = self.teacher_forced_cache()
        if not rows:
            log.warning("teacher-forced stage: no train row has a reference token; skipped")
            return
        params = [p for p in self.head.parameters() if p.requires_grad]
        opt = self.optimizer_factory(
            params=params, **({"lr": hp.teacher_forced_lr} if hp.teacher_forced_lr else {})
        )
        gen = torch.Generator().manual_seed(int(getattr(data, "seed", 0)))
        take = min(size, len(rows))
        order: list[int] = []
        log.info(
            f"teacher-forced stage: {hp.teacher_forced_steps} steps over {len(rows)} rows "
            f"({sum(len(r['p_y']) for r in rows)} reference tokens), {take} rows a step"
        )
        for step in range(hp.teacher_forced_steps):
            if len(order) < take:
                order += torch.randperm(len(rows), generator=gen).tolist()
            batch, order = [rows[i] for i in order[:take]], order[take:]
            out = self.teacher_forced_batch(batch)
            # torch.autograd.grad, not backward: no gradient hooks fire (DDP's would average them)
            for p, g in zip(params, torch.autograd.grad(out["loss"], params), strict=True):
                p.grad = g
            opt.step()
            opt.zero_grad(set_to_none=True)
            self.check_finite_head(f"teacher-forced step {step + 1}")
            loss, nll, reg, mean_w = (float(out[k].detach()) for k in ("loss", "nll", "reg", "mean_w"))
            metrics = {
                "teacher_forced/loss": loss,
                "teacher_forced/nll": nll,
                "teacher_forced/reg": reg,
                "teacher_forced/mean_w": mean_w,
            }
            if self.trainer.is_global_zero:
                for logger in self.loggers:
                    logger.log_metrics(metrics, step=step)
            if (
                step in (0, hp.teacher_forced_steps - 1)
                or (step + 1) % max(1, hp.teacher_forced_steps // 10) == 0
            ):
                log.info(
                    f"teacher-forced step {step + 1}/{hp.teacher_forced_steps}: loss {loss:.4f} "
                    f"(nll {nll:.4f}, reg {reg:.4f}), mean w {mean_w:.3f}"
                )
        self.teacher_forced_done = hp.teacher_forced_steps
        if hp.objective != "teacher_forced":
            self._teacher_forced_cache = None  # REINFORCE follows: the rows' features are not needed again

    # --------------------------------------------------------------------- training

    def rewards(self, task: Any, examples: list[dict], completions: list[str]) -> list[float]:
        """R per completion: the task's reward (`score`), one of its metrics by name, or their
        `mean`; ConfigError naming the task's metrics where it does not compute `reward`."""
        name = self.hparams.reward
        if name == "score":
            return task.reward_batch(examples, completions)
        found = task.metrics_batch(examples, completions)
        if name == "mean":
            return [sum(m.values()) / len(m) for m in found]
        missing = next((m for m in found if name not in m), None)
        if missing is not None:
            raise ConfigError(
                f"model.reward={name!r}: task {task.name!r} does not compute that metric; it computes "
                f"{sorted(missing)}: set model.reward to one of them, score (its headline metric, "
                f"{task.metric}) or mean (the mean of them all)"
            )
        return [m[name] for m in found]

    def training_step(self, batch: list[dict], batch_idx: int) -> Tensor:
        hp = self.hparams
        if hp.objective == "teacher_forced":
            return self.teacher_forced_training_step()
        task = self.train_task
        examples = [e for e in batch for _ in range(hp.num_samples)]
        temperature = hp.temperature if hp.do_sample else 1.0
        out, prompt_mask, completions = self.rollout(
            task, examples, do_sample=hp.do_sample, temperature=temperature
        )
        reward = torch.tensor(
            self.rewards(task, examples, completions), dtype=torch.float32, device=self.device
        )
        p_x, q_x, tv, h_d, h_t, mask, extra = self.score_tokens(
            out.sequences, prompt_mask, out.stats.new_tokens, temperature
        )
        w = run_head(self.head, h_d, h_t, **(extra or {}))

        a = advantage(
            reward,
            hp.baseline,
            num_samples=hp.num_samples,
            constant=hp.baseline_constant,
            running=self.baseline_value if self.baseline_steps > 0 else None,
            normalize=hp.normalize_advantage,
        )
        if hp.baseline == "running":
            m = hp.baseline_momentum if self.baseline_steps > 0 else 0.0
            self.baseline_value.copy_(m * self.baseline_value + (1 - m) * reward.mean())
            self.baseline_steps += 1
        loss, pg, reg, scale = regularised_loss(w, p_x, q_x, tv, mask, a, hp.reg_scale, hp.reg_mode)

        m = mask.float()
        n_tok = m.sum().clamp_min(1)
        bs = len(examples)
        self.log_dict(
            {
                "train/loss": loss,
                "train/pg": pg,
                "train/reg": reg,
                "train/reward": reward.mean(),
                "train/acceptance": 1 - ((w * tv) * m).sum().detach() / n_tok,  # E_t[1 − w_t·TV_t]
                "train/rollout_acceptance_rate": out.stats.acceptance_rate,
                "train/mean_w": (w * m).sum().detach() / n_tok,
                "train/reg_scale": float(scale),
            },
            prog_bar=False,
            batch_size=bs,
        )
        self.log("train/reward_avg", reward.mean(), prog_bar=True, batch_size=bs)
        return loss

    def teacher_forced_training_step(self) -> Tensor:
        """`model.objective=teacher_forced`: one step of the run's optimizer on `teacher_forced_loss`
        over `data.batch_size` cached train rows, drawn by the step's seeded generator (`StepSeeds`:
        a resumed run draws the same rows); the loader's batch only counts the step."""
        rows = self.teacher_forced_cache()
        if not rows:
            raise ConfigError(
                "model.objective=teacher_forced: no train row has a reference token (task.target is "
                "empty for every row): use model.objective=reinforce, or rows with references"
            )
        take = min(int(getattr(self.trainer.datamodule, "batch_size", 16)), len(rows))
        out = self.teacher_forced_batch([rows[i] for i in torch.randperm(len(rows))[:take].tolist()])
        self.log_dict(
            {f"train/{k}": v for k, v in out.items() if k != "loss"} | {"train/loss": out["loss"].detach()},
            prog_bar=False,
            batch_size=take,
        )
        return out["loss"]

    # --------------------------------------------------------------------- validation and export

    def validation_step(self, batch: list[dict], batch_idx: int) -> None:
        hp = self.hparams
        task = self.val_task
        out, _, completions = self.rollout(
            task, batch, do_sample=hp.val_do_sample, temperature=hp.val_temperature
        )
        self.add_validation(out.stats, task.score_batch(batch, completions))

    def validation_metrics(self, totals: Totals, score: float | None) -> dict[str, float]:
        if score is None:
            return {}
        return {
            "val/score": score,
            **self.decoding_metrics(totals),
            "val/mean_w": totals.mean_w,
            # what training maximises: task score, plus λ times the acceptance rate
            OBJECTIVE: score + self.hparams.reg_scale * totals.acceptance_rate,
        }

    def export(self, directory: Path, checkpoint: str) -> None:
        """The head's weights and config (its pair, task, λ, objective and the checkpoint it came from)."""
        self.head.save_pretrained(
            directory,
            reg_scale=self.hparams.reg_scale,
            objective=self.hparams.objective,
            checkpoint=checkpoint or None,
        )


def build_head(head_factory: Callable[..., nn.Module], pair: Any, task_name: str) -> nn.Module:
    """Instantiate the head for the pair's hidden sizes, recording the pair (its name and its models'
    identity, which evaluation checks heads against) and task."""
    return head_factory(
        draft_hidden_size=hidden_size(pair.draft),
        target_hidden_size=hidden_size(pair.target),
        pair=pair.name,
        target_name=pair.target_name,
        draft_name=pair.draft_name,
        task=task_name,
        pair_identity=pair_record(getattr(pair, "identity", None) or {}) or None,
    )


def head_shapes(head_factory: Callable[..., nn.Module], card: Any) -> dict[str, tuple[int, ...]]:
    """The module's head tensor shapes for a pair's card (its hidden sizes), without its weights: built
    on the meta device, the random generator's state kept (the run's own head is drawn after this)."""
    with torch.random.fork_rng(devices=[]), torch.device("meta"):
        head = head_factory(draft_hidden_size=card.hidden["draft"], target_hidden_size=card.hidden["target"])
    return {f"head.{k}": tuple(v.shape) for k, v in head.state_dict().items()}
