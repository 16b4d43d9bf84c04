"""TTPO: test-time policy optimisation with agree/disagree branches (docs/methods.md §5.2).

Per step, for each prompt of the batch:

1. sample ``votes`` (K) responses, extract answers by the allowed rules, vote (as TTRL:
   invalid answers dropped, equivalence clusters among predictions, deterministic ties);
   a prompt without any valid answer is skipped;
2. split the K samples into the agree set P (answer in the majority cluster) and the
   disagree set N (every other sample, invalid ones included) — from predictions only,
   the split never reads gold;
3. train on ``train_samples`` (K_train) of them, balanced between P and N when both are
   large enough (half each; the rest from the other set), first ones in sample order;
4. agree branch: on-policy self-distillation ``L_OPSD = (1/T) sum_t w(t) KL(q_t || p_t)``
   with the teacher ``q_t = pi(. | [x; "answer: a_hat"], y_<t)`` (no grad; the current
   policy, or the frozen initial policy with ``teacher="frozen_base"``), the student
   ``p_t = pi_theta(. | x, y_<t)`` and the soft-OR weight ``w = H + D - H*D``; by
   default (ours, ``support_top_p``) the teacher is first restricted to the student's own
   top-p tokens;
5. disagree branch: grouped RL on confident errors, ``L_N = -(A/T) sum_t m(t) log pi(y_t)``
   with ``A`` the GRPO advantage of ``r = 1[ans == a_hat]`` over the K samples (< 0 on N)
   and ``m(t) = 1[s(t) >= median]``, ``s(t) = -log p_t(y_t) (1 - H(t))``;
6. ``L = (1/|B|)(sum_P L_OPSD + lambda sum_N L_N)``, ``lambda = 10`` by default (paper
   0.1, at which SmolLM2-135M collapsed: docs/methods.md §5.2), one optimizer step
   per batch (micro-batches weighted so they add up to ``L``).

The loss pieces are :mod:`deciplane.objectives.ttpo` (see its docstring for our reading of
the percentile/normalisation scope). Student and teacher distributions both use the
sampling temperature. Reference (paper): Qwen3-1.7B 38.0 -> 45.2 (TTRL 40.2).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Sequence

import torch

from deciplane.adapt.base import AdaptConfig, BaseAdapter, extract, vote
from deciplane.errors import ConfigError
from deciplane.options import option
from deciplane.engine.logprobs import forward_responses
from deciplane.engine.optim import MicroLoss, Normaliser, is_step_metric, optimizer_step
from deciplane.objectives import TTPOLossConfig, grpo_advantages, group_ids_from_keys, ttpo_loss
from deciplane.objectives.ttpo import agree_branch_kl
from deciplane.types import Trajectory, UnlabeledTask

log = logging.getLogger(__name__)


@dataclass
class TTPOConfig(AdaptConfig):
    """TTPO options. Defaults are CPU-sized; ``TTPOConfig.paper()`` gives the paper's."""

    votes: int = option(8, ge=2)
    """K: responses sampled per prompt for the vote (paper: 64); named as TTRL's N."""
    train_samples: int = 4
    """K_train: samples per prompt trained on, balanced P/N when possible (paper: 8)."""
    loss: TTPOLossConfig = field(default_factory=lambda: TTPOLossConfig(lam=10.0))
    """The TTPO loss, used as it is: lam, the weight of the disagree-branch loss L_N (ours 10.0, paper 0.1: at 0.1 the agree branch's self-distillation outweighs the RL on confident errors and SmolLM2-135M collapsed, docs/methods.md §5.2), and entropy_clip_quantile, where the student entropy is clipped per sample before normalisation (paper: 0.98). 0.2's lam, entropy_clip_quantile still load, with a warning."""
    teacher: Literal["current", "frozen_base"] = "current"
    """Teacher of the agree branch: the current policy (no grad) or the frozen initial policy (LoRA adapters off)."""
    hint_template: str = "answer: {answer}"
    """What the teacher sees appended to the prompt ([x; "answer: a_hat"])."""
    support_top_p: float | None = option(0.9, gt=0, le=1)
    """Agree branch (ours; `null` = the paper's full-vocabulary KL): the teacher is restricted to the student's own top-p tokens at each position and renormalised, so the hint can reweight what the student would say but not make it open with the answer (docs/methods.md §5.2)."""
    branches: Literal["both", "agree", "disagree"] = "both"
    """Which branches train (an ablation switch, ours): `agree` = self-distillation only, `disagree` = the RL on confident errors only; `both` is TTPO."""

    PAPER: ClassVar[dict[str, Any]] = {"votes": 64, "train_samples": 8, "loss.lam": 0.1,
                                       "loss.entropy_clip_quantile": 0.98, "teacher": "current",
                                       "support_top_p": None}
    CONFIG_ALIASES: ClassVar[dict[str, str]] = {
        "lam": "loss.lam", "entropy_clip_quantile": "loss.entropy_clip_quantile"}

    def validate(self) -> None:
        super().validate()
        if not 1 <= self.train_samples <= self.votes:
            raise ConfigError(f"TTPOConfig.train_samples = {self.train_samples} must be in "
                              f"[1, votes={self.votes}]")
        if "{answer}" not in self.hint_template:
            raise ConfigError("TTPOConfig.hint_template must contain '{answer}' (where the "
                              "majority answer goes), e.g. 'answer: {answer}'")


def balanced_selection(agree: Sequence[bool], k: int) -> list[int]:
    """Indices of ``k`` samples, half from the agree set and half from the disagree set
    when both have enough, else filled from the other; first ones in sample order."""
    pos = [i for i, a in enumerate(agree) if a]
    neg = [i for i, a in enumerate(agree) if not a]
    n_pos = min(len(pos), (k + 1) // 2)
    n_neg = min(len(neg), k - n_pos)
    n_pos = min(len(pos), k - n_neg)
    return sorted(pos[:n_pos] + neg[:n_neg])


def split_agree(answers: Sequence[str | None]):
    """``(vote, agree flags)`` from predictions only (no gold anywhere)."""
    v = vote(answers)
    agree = list(v.agree) if v.answer is not None else [False] * len(answers)
    return v, agree


class TTPO(BaseAdapter):
    """Test-time policy optimisation. ``TTPO(policy, TTPOConfig()).run(tasks)``."""

    Config = TTPOConfig

    def __init__(self, policy, config: TTPOConfig | None = None, progress=None):
        super().__init__(policy, config, progress)
        cfg = self.config
        self.loss_cfg = cfg.loss
        self.optimizer = self.new_optimizer()
        # (trainable_parameters() has snapshotted the frozen reference for full fine-tuning)

    def samples_per_prompt(self) -> int:
        return self.config.votes

    # -- one step ------------------------------------------------------------------------
    def adapt_step(self, tasks: list[UnlabeledTask], step: int) -> dict[str, float]:
        cfg = self.config
        groups = self.sample_task_groups(tasks, step, cfg.votes)
        rows: list[Trajectory] = []
        agree_rows: list[bool] = []
        adv_rows: list[float] = []
        teacher_prompts: list[torch.Tensor | None] = []
        n_valid = 0
        last_majority = self.records.last_labels()   # before this step's votes are recorded
        revisits: list[float] = []
        for task, group in zip(tasks, groups):
            answers = extract([tr.turns[0].action for tr in group])
            v, agree = split_agree(answers)
            rewards = [1.0 if a else 0.0 for a in agree]
            self._record_vote(step, task, answers, v, rewards)
            if v.answer is None:
                continue
            n_valid += 1
            if v.tie:
                log.info("TTPO step %d task %s: tie between %s; kept %r (first to appear)",
                         step, task.id, [v.answer, *v.tied], v.answer)
            adv = grpo_advantages(torch.tensor(rewards), group_ids_from_keys([0] * len(rewards)))
            hint_ids = self.policy.tokenize(self.format(task, cfg.hint_template.format(answer=v.answer)))
            if last_majority.get(task.id) is not None:
                revisits.append(float(last_majority[task.id] == v.answer))
            for i in balanced_selection(agree, cfg.train_samples):
                if cfg.branches != "both" and agree[i] != (cfg.branches == "agree"):
                    continue
                rows.append(group[i])
                agree_rows.append(agree[i])
                adv_rows.append(float(adv[i]))
                teacher_prompts.append(hint_ids if agree[i] else None)
        metrics = {"vote/valid_prompts": float(n_valid), "vote/prompts": float(len(tasks)),
                   "ttpo/agree_rows": float(sum(agree_rows)),
                   "ttpo/disagree_rows": float(len(rows) - sum(agree_rows))}
        if revisits:          # a prompt seen again (epochs > 1): is its majority unchanged?
            metrics["ttpo/same_majority_as_last_visit"] = sum(revisits) / len(revisits)
        # nothing to learn: no rows, or only disagree rows whose advantage is 0
        if not rows or (not any(agree_rows) and all(a == 0.0 for a in adv_rows)):
            self.optimizer.skip()
            metrics["update/skipped"] = 1.0
            return metrics
        metrics.update(self._update(rows, agree_rows, adv_rows, teacher_prompts))
        metrics["update/skipped"] = 0.0
        return metrics

    def _teacher_logp(self, prompts: list[torch.Tensor], responses: list[torch.Tensor]) -> torch.Tensor:
        """Teacher full log-probs ``(B, R, V)`` (no grad) on the agree rows."""
        if self.config.teacher == "frozen_base":
            with self.policy.reference() as ref:
                fwd = forward_responses(self.policy, prompts, responses, full=True, grad=False,
                                        model=ref, temperature=self.config.temperature,
                                        budget=self.budget)
        else:
            fwd = forward_responses(self.policy, prompts, responses, full=True, grad=False,
                                    temperature=self.config.temperature, budget=self.budget)
        return fwd.full_logp

    def _update(self, rows, agree_rows, adv_rows, teacher_prompts) -> dict[str, float]:
        """One optimizer step on the selected rows: ``L = (1/|B|) sum_rows L_row`` (the
        normaliser: one unit per row)."""
        cfg = self.config

        def loss_fn(mb: list[int]) -> MicroLoss:
            prompts = [rows[i].turns[0].prompt_ids for i in mb]
            resps = [rows[i].turns[0].response_ids for i in mb]
            with self.budget.phase("forward"):
                fwd = forward_responses(self.policy, prompts, resps, with_entropy=True, full=True,
                                        temperature=cfg.temperature, budget=self.budget)
                dev = fwd.logp.device
                agree = torch.tensor([agree_rows[i] for i in mb], dtype=torch.bool, device=dev)
                pos = [j for j, i in enumerate(mb) if agree_rows[i]]
                q = None
                if pos:
                    q = self._teacher_logp([teacher_prompts[mb[j]] for j in pos],
                                           [resps[j] for j in pos])                 # (P, Rp, V)
                kl = agree_branch_kl(fwd.full_logp, q, pos,
                                     [int(r.numel()) for r in resps],
                                     support_top_p=cfg.support_top_p)               # (B, R)
            adv = torch.tensor([adv_rows[i] for i in mb], dtype=torch.float32, device=dev)
            # ttpo_loss is a mean over the micro-batch's rows
            out = ttpo_loss(self.loss_cfg, kl, fwd.entropy.detach(), fwd.logp, fwd.mask, agree, adv)
            return MicroLoss(task=out.loss, metrics=out.metrics, tokens=fwd.n_tokens)

        n = len(rows)
        m = optimizer_step(self.optimizer, list(range(n)), cfg.micro_batch_size, loss_fn,
                           Normaliser([1] * n))
        return {k: v for k, v in m.items() if not is_step_metric(k) or k == "optim/grad_norm"}


__all__ = ["TTPO", "TTPOConfig", "agree_branch_kl", "balanced_selection", "split_agree"]
