"""Single-turn rollouts and the GRPO-family update: the core shared by the Math-v0 GRPO
trainer and the test-time adapters (TTRL, TTPO).

Everything that touches the model goes through this module, so that a :class:`Budget`
counts every sample, generated token, forward and backward pass exactly once.

Usage (what a trainer or an adapter does per step)::

    from deciplane.trainers.single_turn import Budget, GRPOConfig, GRPOUpdate, sample_groups

    budget = Budget()
    update = GRPOUpdate(policy, GRPOConfig(kl_coef=0.001), budget=budget, lr=1e-5)
    with budget.clock():                                   # wall time
        groups = sample_groups(policy, prompts, group_size=8, max_new_tokens=24,
                               temperature=1.0, seed=step, budget=budget)
        for g in groups:                                   # one group per prompt
            for traj in g:
                traj.turns[0].reward = my_reward(traj.turns[0].action)
        stats = update.step(groups)                        # one optimiser step (or a skip)

Pieces:

* :class:`Budget` — ``samples``, ``generated_tokens``, ``prefill_tokens``,
  ``forward_tokens``/``forward_passes`` (teacher-forced forwards: training, old/reference
  log-probs, teachers), ``backward_tokens``/``backward_passes``, ``optimizer_steps``,
  ``skipped_steps``, ``wall_time_s`` and per-phase seconds.
* :func:`sample_groups` — ``group_size`` responses per prompt as single-turn
  :class:`~deciplane.types.Trajectory` records (prompt ids, response ids, the sampler's
  log-probs), grouped by prompt; :func:`generate_texts` for greedy/sampled answers.
* :func:`forward_responses` — one batched teacher-forced forward over ``prompt +
  response`` giving per-token log-probs ``(B, R)`` (right-aligned, with a mask), and on
  request entropies and full-vocabulary log-probs; counted in the budget.
* :class:`GRPOConfig` + :class:`GRPOUpdate` — group advantages, clipped surrogate, KL to
  the frozen reference and aggregation, all from :mod:`deciplane.objectives`; micro-batched
  gradient accumulation whose sum equals the full-batch loss; grad-norm clipping; the
  step is skipped (no optimiser call, so no weight decay either) when every group is
  degenerate.
* :class:`Optimizer` — AdamW + clipping + skip bookkeeping, reused by losses that are not
  GRPO (e.g. TTPO).

Layout of per-token tensors: ``(B, R)`` with ``R`` the longest response of the batch;
responses are *right-aligned* (the layout of :meth:`Policy.sequence_logprobs`), and
``mask`` is true on real response tokens. Prompt and padding tokens never enter a mean.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Iterator, Literal, Sequence

import torch

from deciplane.errors import ConfigError
from deciplane.objectives import (AdvantageConfig, PolicyLossConfig, compute_advantages,
                                  degenerate_groups, policy_loss)
from deciplane.types import Trajectory, Turn

# ---------------------------------------------------------------------------------------
# Budget
# ---------------------------------------------------------------------------------------


@dataclass
class Budget:
    """What a run spent. Every count is incremented by the functions of this module only.

    ``forward_tokens`` counts the non-padding tokens (prompt + response) of every
    teacher-forced forward pass (with or without grad); generation is counted separately
    (``prefill_tokens`` = prompt tokens per sampled sequence, ``generated_tokens`` =
    response tokens). ``backward_tokens`` counts the tokens of the forwards whose loss
    was backpropagated.
    """

    samples: int = 0
    generated_tokens: int = 0
    prefill_tokens: int = 0
    forward_tokens: int = 0
    forward_passes: int = 0
    backward_tokens: int = 0
    backward_passes: int = 0
    optimizer_steps: int = 0
    skipped_steps: int = 0
    wall_time_s: float = 0.0
    seconds: dict[str, float] = field(default_factory=dict)
    """Seconds per phase: ``generate``, ``forward``, ``backward``, ``optimizer``."""

    @contextlib.contextmanager
    def clock(self) -> Iterator[None]:
        """Add the wall time of the ``with`` block to ``wall_time_s``."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.wall_time_s += time.perf_counter() - t0

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0

    def as_dict(self) -> dict:
        d = asdict(self)
        d["seconds"] = {k: round(v, 3) for k, v in self.seconds.items()}
        d["wall_time_s"] = round(self.wall_time_s, 3)
        return d

    def __iadd__(self, other: "Budget") -> "Budget":
        for f in ("samples", "generated_tokens", "prefill_tokens", "forward_tokens",
                  "forward_passes", "backward_tokens", "backward_passes", "optimizer_steps",
                  "skipped_steps", "wall_time_s"):
            setattr(self, f, getattr(self, f) + getattr(other, f))
        for k, v in other.seconds.items():
            self.seconds[k] = self.seconds.get(k, 0.0) + v
        return self


# ---------------------------------------------------------------------------------------
# Sampling
# ---------------------------------------------------------------------------------------


def _count_generation(budget: Budget | None, gens: Sequence) -> None:
    if budget is None:
        return
    budget.samples += len(gens)
    budget.generated_tokens += sum(int(g.response_ids.numel()) for g in gens)
    budget.prefill_tokens += sum(int(g.prompt_ids.numel()) for g in gens)


def generate(policy, prompts: Sequence[str], *, max_new_tokens: int, temperature: float = 1.0,
             do_sample: bool = True, num_return_sequences: int = 1, top_p: float = 1.0,
             seed: int | None = None, budget: Budget | None = None,
             prompts_per_batch: int | None = None) -> list:
    """:meth:`Policy.generate` in chunks of ``prompts_per_batch`` prompts (all at once when
    ``None``), counted in ``budget``. Returns the generations in prompt-major order with
    ``prompt_index`` relative to ``prompts``."""
    prompts = list(prompts)
    step = prompts_per_batch or max(len(prompts), 1)
    out = []
    for start in range(0, len(prompts), step):
        chunk = prompts[start:start + step]
        ctx = budget.phase("generate") if budget is not None else contextlib.nullcontext()
        with ctx:
            gens = policy.generate(chunk, max_new_tokens=max_new_tokens,
                                   temperature=temperature if do_sample else 1.0,
                                   do_sample=do_sample, num_return_sequences=num_return_sequences,
                                   top_p=top_p,
                                   seed=None if seed is None else seed + start)
        for g in gens:
            g.prompt_index += start
        _count_generation(budget, gens)
        out.extend(gens)
    return out


def generate_texts(policy, prompts: Sequence[str], *, max_new_tokens: int,
                   greedy: bool = True, temperature: float = 1.0, top_p: float = 1.0,
                   seed: int | None = None, budget: Budget | None = None,
                   prompts_per_batch: int | None = 32) -> list[str]:
    """One response text per prompt (greedy by default), counted in ``budget``."""
    gens = generate(policy, prompts, max_new_tokens=max_new_tokens, temperature=temperature,
                    do_sample=not greedy, top_p=top_p, seed=seed, budget=budget,
                    prompts_per_batch=prompts_per_batch)
    return [g.text for g in gens]


def sample_groups(policy, prompts: Sequence[str], *, group_size: int, max_new_tokens: int,
                  temperature: float = 1.0, top_p: float = 1.0, seed: int | None = None,
                  budget: Budget | None = None, group_ids: Sequence[str] | None = None,
                  prompts_per_batch: int | None = None) -> list[list[Trajectory]]:
    """``group_size`` sampled responses per prompt, as single-turn trajectories.

    ``result[i]`` is the group of ``prompts[i]`` (group id ``group_ids[i]`` or ``"i"``);
    each trajectory has one :class:`~deciplane.types.Turn` with ``observation`` = the
    prompt text, ``action`` = the response text, ``prompt_ids``, ``response_ids`` and
    the sampler's detached ``response_logprobs`` (at ``temperature``); ``reward`` is 0
    until the caller sets it.
    """
    if group_size < 1:
        raise ConfigError(f"group_size must be >= 1, got {group_size}")
    gids = list(group_ids) if group_ids is not None else [str(i) for i in range(len(prompts))]
    if len(gids) != len(prompts):
        raise ConfigError(f"got {len(prompts)} prompts but {len(gids)} group ids; pass one per prompt")
    gens = generate(policy, prompts, max_new_tokens=max_new_tokens, temperature=temperature,
                    do_sample=True, num_return_sequences=group_size, top_p=top_p, seed=seed,
                    budget=budget, prompts_per_batch=prompts_per_batch)
    groups: list[list[Trajectory]] = [[] for _ in prompts]
    for g in gens:
        turn = Turn(observation=prompts[g.prompt_index], action=g.text, reward=0.0,
                    prompt_ids=g.prompt_ids, response_ids=g.response_ids,
                    response_logprobs=g.response_logprobs)
        groups[g.prompt_index].append(Trajectory(turns=[turn], group_id=gids[g.prompt_index]))
    return groups


# ---------------------------------------------------------------------------------------
# Teacher-forced forward passes
# ---------------------------------------------------------------------------------------


@dataclass
class ResponseForward:
    """Per-token results of one batched forward, responses right-aligned in ``(B, R)``."""

    logp: torch.Tensor                       # (B, R) log-prob of each response token
    mask: torch.Tensor                       # (B, R) bool, true on response tokens
    n_tokens: int                            # non-pad tokens processed (prompt + response)
    entropy: torch.Tensor | None = None      # (B, R) entropy of the token distribution
    full_logp: torch.Tensor | None = None    # (B, R, V) log-softmax over the vocabulary


def pad_responses(values: Sequence[torch.Tensor], width: int | None = None,
                  fill: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-align 1-D per-response tensors into ``(B, R)`` plus the bool mask."""
    width = width if width is not None else max((int(v.numel()) for v in values), default=0)
    out = torch.full((len(values), width), fill, dtype=torch.float32)
    mask = torch.zeros((len(values), width), dtype=torch.bool)
    for i, v in enumerate(values):
        n = int(v.numel())
        if n:
            out[i, width - n:] = v.float()
            mask[i, width - n:] = True
    return out, mask


def forward_responses(policy, prompt_ids: Sequence[torch.Tensor],
                      response_ids: Sequence[torch.Tensor], *, temperature: float = 1.0,
                      with_entropy: bool = False, full: bool = False, grad: bool = True,
                      model: torch.nn.Module | None = None, budget: Budget | None = None
                      ) -> ResponseForward:
    """Log-probs of ``response_ids[i]`` given ``prompt_ids[i]`` in one batched forward.

    Logits are divided by ``temperature`` (the sampling temperature, as the sampler's
    log-probs were); only the last ``max R + 1`` positions get logits. ``model``
    overrides ``policy.model`` (e.g. the module yielded by ``policy.reference()``).
    ``grad=False`` runs under ``torch.no_grad()``. ``full=True`` also returns the
    log-softmax over the vocabulary (for distillation losses).
    """
    from deciplane.agents.policy import left_pad, position_ids_from_mask

    if len(prompt_ids) != len(response_ids) or not prompt_ids:
        raise ConfigError(f"need one response per prompt and at least one pair, got "
                          f"{len(prompt_ids)} prompts and {len(response_ids)} responses")
    model = policy.model if model is None else model
    seqs = [torch.cat([p.long().cpu(), r.long().cpu()]) for p, r in zip(prompt_ids, response_ids)]
    ids, attn = left_pad(seqs, policy.tokenizer.pad_token_id)                   # (B, L)
    lengths = [int(r.numel()) for r in response_ids]
    width = max(lengths)
    keep = width + 1
    dev = policy.device
    ctx = torch.enable_grad() if grad else torch.no_grad()
    with ctx:
        out = model(input_ids=ids.to(dev), attention_mask=attn.to(dev),
                    position_ids=position_ids_from_mask(attn).to(dev), use_cache=False,
                    logits_to_keep=keep)
        logits = out.logits[:, -keep:-1, :].float() / temperature             # (B, R, V)
        targets = ids[:, -width:].to(dev)                                      # (B, R)
        full_logp = torch.log_softmax(logits, dim=-1)                          # (B, R, V)
        logp = full_logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)         # (B, R)
        entropy = None
        if with_entropy:
            entropy = -(full_logp.exp() * full_logp).sum(-1)                   # (B, R)
    _, mask = pad_responses([torch.zeros(n) for n in lengths], width)
    n_tokens = int(attn.sum())
    if budget is not None:
        budget.forward_tokens += n_tokens
        budget.forward_passes += 1
    return ResponseForward(logp=logp, mask=mask.to(dev), n_tokens=n_tokens, entropy=entropy,
                           full_logp=full_logp if full else None)


def backward(loss: torch.Tensor, fwd: ResponseForward, budget: Budget | None = None) -> None:
    """``loss.backward()``, counting the forward's tokens as backpropagated."""
    ctx = budget.phase("backward") if budget is not None else contextlib.nullcontext()
    with ctx:
        loss.backward()
    if budget is not None:
        budget.backward_tokens += fwd.n_tokens
        budget.backward_passes += 1


# ---------------------------------------------------------------------------------------
# Optimiser
# ---------------------------------------------------------------------------------------


class Optimizer:
    """AdamW over ``params`` with global grad-norm clipping and skip bookkeeping."""

    def __init__(self, params: Sequence[torch.nn.Parameter], *, lr: float,
                 weight_decay: float = 0.0, betas: tuple[float, float] = (0.9, 0.999),
                 max_grad_norm: float = 1.0, budget: Budget | None = None):
        self.params = [p for p in params if p.requires_grad]
        if not self.params:
            raise ConfigError("no trainable parameters; add LoRA adapters (finetune=lora) or "
                              "unfreeze the model (finetune=full)")
        if lr <= 0:
            raise ConfigError(f"lr must be > 0, got {lr}")
        self.opt = torch.optim.AdamW(self.params, lr=lr, weight_decay=weight_decay,
                                     betas=tuple(betas))
        self.max_grad_norm = max_grad_norm
        self.budget = budget

    def zero_grad(self) -> None:
        self.opt.zero_grad(set_to_none=True)

    def step(self) -> float:
        """Clip (if ``max_grad_norm > 0``), step, zero the grads; returns the pre-clip norm."""
        ctx = self.budget.phase("optimizer") if self.budget is not None else contextlib.nullcontext()
        with ctx:
            grads = [p.grad for p in self.params if p.grad is not None]
            if not grads:
                norm = 0.0
            elif self.max_grad_norm > 0:
                norm = float(torch.nn.utils.clip_grad_norm_(self.params, self.max_grad_norm))
            else:
                norm = float(torch.linalg.vector_norm(torch.stack(
                    [torch.linalg.vector_norm(g) for g in grads])))
            if math.isfinite(norm):
                self.opt.step()
            self.zero_grad()
        if self.budget is not None:
            if math.isfinite(norm):
                self.budget.optimizer_steps += 1
            else:
                self.budget.skipped_steps += 1
        return norm

    def skip(self) -> None:
        """Record a skipped step (degenerate batch): grads are dropped, no AdamW call."""
        self.zero_grad()
        if self.budget is not None:
            self.budget.skipped_steps += 1


# ---------------------------------------------------------------------------------------
# GRPO-family update
# ---------------------------------------------------------------------------------------


@dataclass
class GRPOConfig:
    """The GRPO-family loss and update schedule (METHODS §4)."""

    advantage: Literal["grpo", "dr_grpo", "rloo", "reinforce_pp"] = "grpo"
    """Group advantage estimator."""
    clip_eps: float = 0.2
    """Lower clip epsilon (symmetric clipping when ``clip_eps_high`` is null)."""
    clip_eps_high: float | None = None
    """Upper clip epsilon (DAPO clip-higher, e.g. 0.28); null = ``clip_eps``."""
    ratio: Literal["token", "sequence"] = "token"
    """Token ratios (PPO/GRPO) or the GSPO sequence ratio."""
    aggregation: Literal["token_mean", "seq_mean", "seq_sum_const"] = "token_mean"
    """Loss aggregation over the whole optimizer batch (micro-batches are re-weighted so
    that accumulation equals the full-batch value)."""
    max_len: int | None = None
    """Constant divisor for ``seq_sum_const`` (the generation limit)."""
    kl_coef: float = 0.0
    """Coefficient of the KL penalty to the frozen reference (initial policy)."""
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    """Per-token KL estimator."""
    temperature: float = 1.0
    """Logits are divided by this (use the sampling temperature)."""
    epochs: int = 1
    """Passes over each rollout batch."""
    minibatches: int = 1
    """Optimizer steps per epoch (the batch is split in this many parts)."""
    micro_batch_size: int = 8
    """Sequences per forward pass (gradients accumulate across micro-batches)."""
    max_grad_norm: float = 1.0
    """Global gradient-norm clip (0 = off)."""
    old_logprobs: Literal["auto", "recompute", "sampler"] = "auto"
    """Where ``log pi_old`` comes from. ``recompute``: a no-grad forward before the
    first update; ``sampler``: the generator's log-probs; ``auto``: with a single
    optimizer step per batch (epochs = minibatches = 1) the detached log-probs of the
    training forward itself — the same weights, so identical to ``recompute`` without the
    extra pass — else ``recompute``."""
    drop_degenerate_groups: bool = False
    """Leave groups with all-equal rewards out of the update (they carry no policy
    gradient, only the KL term); saves their forward/backward."""

    def __post_init__(self) -> None:
        validate_grpo(self)

    def loss_config(self) -> PolicyLossConfig:
        return PolicyLossConfig(eps_low=self.clip_eps, eps_high=self.clip_eps_high,
                                ratio=self.ratio, aggregation=self.aggregation,
                                max_len=self.max_len, kl_beta=self.kl_coef,
                                kl_estimator=self.kl_estimator)


def validate_grpo(cfg: GRPOConfig) -> None:
    for name in ("epochs", "minibatches", "micro_batch_size"):
        if getattr(cfg, name) < 1:
            raise ConfigError(f"GRPOConfig.{name} = {getattr(cfg, name)} must be >= 1")
    if cfg.temperature <= 0:
        raise ConfigError(f"GRPOConfig.temperature = {cfg.temperature} must be > 0")
    if cfg.max_grad_norm < 0:
        raise ConfigError(f"GRPOConfig.max_grad_norm = {cfg.max_grad_norm} must be >= 0 (0 = off)")
    cfg.loss_config()  # validates clip/aggregation/kl (raises ConfigError)
    AdvantageConfig(estimator=cfg.advantage)


@dataclass
class StepStats:
    """What one :meth:`GRPOUpdate.step` did. ``metrics`` use namespaced names."""

    skipped: bool
    n_samples: int
    n_tokens: int
    grad_norm: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)


def _flatten(groups: Sequence[Sequence[Trajectory]]) -> list[Trajectory]:
    return [t for g in groups for t in g]


def micro_batches(n: int, size: int) -> list[list[int]]:
    return [list(range(i, min(i + size, n))) for i in range(0, n, size)]


def aggregation_share(aggregation: str, mask: torch.Tensor, total_tokens: int,
                      total_rows: int) -> float:
    """Weight of one micro-batch's aggregated loss in the full-batch loss, so that the
    sum over micro-batches equals the loss of the whole batch: token share for
    ``token_mean``, row share otherwise."""
    if aggregation == "token_mean":
        return int(mask.sum()) / max(total_tokens, 1)
    rows = int(mask.any(dim=1).sum()) if aggregation == "seq_mean" else mask.shape[0]
    return rows / max(total_rows, 1)


class GRPOUpdate:
    """One GRPO-family optimisation step per call on groups of single-turn samples.

    ``policy`` is a :class:`~deciplane.agents.Policy`; the reference for the KL term is
    ``policy.reference()`` (LoRA adapters off, or a frozen copy of the initial weights).
    """

    def __init__(self, policy, config: GRPOConfig, *, budget: Budget | None = None,
                 optimizer: Optimizer | None = None, lr: float = 1e-5,
                 weight_decay: float = 0.0):
        self.policy = policy
        self.cfg = config
        self.budget = budget if budget is not None else Budget()
        self.loss_cfg = config.loss_config()
        self.optimizer = optimizer or Optimizer(policy.trainable_parameters(), lr=lr,
                                                weight_decay=weight_decay,
                                                max_grad_norm=config.max_grad_norm,
                                                budget=self.budget)

    # -- pieces ---------------------------------------------------------------------------
    def advantages(self, trajs: Sequence[Trajectory]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(advantages (N,), degenerate (N,) bool)`` from the trajectories' rewards."""
        from deciplane.objectives import group_ids_from_keys

        rewards = torch.tensor([t.total_reward for t in trajs], dtype=torch.float32)
        gids = group_ids_from_keys([t.group_id for t in trajs])
        adv = compute_advantages(AdvantageConfig(estimator=self.cfg.advantage), rewards, gids)
        return adv, degenerate_groups(rewards, gids)

    def _logp_no_grad(self, trajs: Sequence[Trajectory], reference: bool) -> list[torch.Tensor]:
        """Per-sample detached log-probs under the reference or the current policy."""
        out: list[torch.Tensor] = []
        for mb in micro_batches(len(trajs), self.cfg.micro_batch_size):
            prompts = [trajs[i].turns[0].prompt_ids for i in mb]
            resps = [trajs[i].turns[0].response_ids for i in mb]
            with self.budget.phase("forward"):
                if reference:
                    with self.policy.reference() as ref:
                        fwd = forward_responses(self.policy, prompts, resps, grad=False, model=ref,
                                                temperature=self.cfg.temperature, budget=self.budget)
                else:
                    fwd = forward_responses(self.policy, prompts, resps, grad=False,
                                            temperature=self.cfg.temperature, budget=self.budget)
            for row, i in enumerate(mb):
                n = int(trajs[i].turns[0].response_ids.numel())
                out.append(fwd.logp[row, fwd.logp.shape[1] - n:].detach().cpu())
        return out

    # -- the step -------------------------------------------------------------------------
    def step(self, groups: Sequence[Sequence[Trajectory]]) -> StepStats:
        """Advantages -> (old / reference log-probs) -> micro-batched loss -> optimizer step.

        Skips the step (no optimizer call) when every group has all-equal rewards.
        Returns the mean of the metrics over the optimizer steps taken.
        """
        trajs = _flatten(groups)
        if not trajs:
            self.optimizer.skip()
            return StepStats(skipped=True, n_samples=0, n_tokens=0)
        adv, degen = self.advantages(trajs)
        rewards = [t.total_reward for t in trajs]
        base = {"rollout/reward_mean": float(sum(rewards) / len(rewards)),
                "rollout/degenerate_frac": float(degen.float().mean())}
        if bool(degen.all()):
            self.optimizer.skip()
            return StepStats(skipped=True, n_samples=len(trajs), n_tokens=0, metrics=base)
        if self.cfg.drop_degenerate_groups:
            keep = [i for i in range(len(trajs)) if not bool(degen[i])]
            trajs, adv = [trajs[i] for i in keep], adv[keep]
        n_updates = self.cfg.epochs * self.cfg.minibatches
        mode = self.cfg.old_logprobs
        if mode == "auto":
            mode = "detached" if n_updates == 1 else "recompute"
        old: list[torch.Tensor] | None = None
        if mode == "recompute":
            old = self._logp_no_grad(trajs, reference=False)
        elif mode == "sampler":
            old = [t.turns[0].response_logprobs for t in trajs]
        ref = self._logp_no_grad(trajs, reference=True) if self.cfg.kl_coef > 0 else None

        collected: list[dict[str, float]] = []
        norms: list[float] = []
        n_tokens = 0
        gen = torch.Generator().manual_seed(len(trajs))
        for _epoch in range(self.cfg.epochs):
            order = torch.randperm(len(trajs), generator=gen).tolist() if self.cfg.minibatches > 1 \
                else list(range(len(trajs)))
            parts = [order[k::self.cfg.minibatches] for k in range(self.cfg.minibatches)]
            for part in parts:
                if not part:
                    continue
                metrics, toks = self._accumulate(trajs, part, adv, old, ref)
                n_tokens += toks
                norms.append(self.optimizer.step())
                collected.append(metrics)
        avg = {k: sum(m[k] for m in collected) / len(collected) for k in collected[0]}
        avg.update(base)
        avg["optim/grad_norm"] = sum(norms) / len(norms)
        return StepStats(skipped=False, n_samples=len(trajs), n_tokens=n_tokens,
                         grad_norm=avg["optim/grad_norm"], metrics=avg)

    def _accumulate(self, trajs, part, adv, old, ref) -> tuple[dict[str, float], int]:
        """Forward/backward over the micro-batches of one optimizer step; the micro-batch
        losses are weighted so their sum is the aggregated loss of the whole part."""
        lengths = [int(trajs[i].turns[0].response_ids.numel()) for i in part]
        total_tokens, total_rows = sum(lengths), len(part)
        metrics: dict[str, float] = {}
        n_tokens = 0
        for mb in micro_batches(len(part), self.cfg.micro_batch_size):
            idx = [part[j] for j in mb]
            with self.budget.phase("forward"):
                fwd = forward_responses(self.policy, [trajs[i].turns[0].prompt_ids for i in idx],
                                        [trajs[i].turns[0].response_ids for i in idx],
                                        temperature=self.cfg.temperature, budget=self.budget)
            width = fwd.logp.shape[1]
            old_t = fwd.logp.detach() if old is None else \
                pad_responses([old[i] for i in idx], width)[0].to(fwd.logp.device)
            ref_t = None if ref is None else pad_responses([ref[i] for i in idx], width)[0].to(fwd.logp.device)
            out = policy_loss(self.loss_cfg, fwd.logp, old_t, adv[idx].to(fwd.logp.device),
                              fwd.mask, ref_logp=ref_t)
            share = aggregation_share(self.cfg.aggregation, fwd.mask, total_tokens, total_rows)
            backward(out.loss * share, fwd, self.budget)
            n_tokens += fwd.n_tokens
            for k, v in out.metrics.items():
                metrics[k] = metrics.get(k, 0.0) + v * share
        return metrics, n_tokens


__all__ = ["Budget", "GRPOConfig", "GRPOUpdate", "Optimizer", "ResponseForward", "StepStats",
           "aggregation_share", "backward", "forward_responses", "generate", "generate_texts",
           "micro_batches", "pad_responses", "sample_groups"]
