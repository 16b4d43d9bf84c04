"""The algorithms the trainer runs; each supplies its rollout, its loss and its evaluation.

* :class:`MenuPPO` — RLiD: PPO on menu decisions (METHODS §1) with length-balanced
  weights and one bias control, optionally + distillation to a teacher (the env expert
  one-hot, or another policy's menu distribution) on the student's own states, combined by
  CORD in the trainer (METHODS §3); optional behaviour-cloning warm start. With
  ``advantage: gae`` a value head (:mod:`deciplane.trainers.critic`) gives per-decision
  GAE advantages instead of the episode-level group baseline.
* :class:`TextPPO` — the free-text agent trained token-level (PPO, clip / clip-higher) or
  with TLM-DRE turn weights (METHODS §2), each token keeping its turn id.
* :class:`MathGRPO` — single-turn GRPO family on ``deciplane/Math-v0`` through
  :mod:`deciplane.trainers.single_turn`.

Loss formulas all come from :mod:`deciplane.objectives`; nothing here re-derives them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from deciplane.errors import ConfigError
from deciplane.objectives.advantages import (ADVANTAGE_ESTIMATORS, is_degenerate_batch)
from deciplane.trainers.config import (DistillConfig, MathGRPOConfig, RLiDPPOConfig,
                                       TextPPOConfig, TrainConfig)
from deciplane.trainers.envs import EnvSuite
from deciplane.trainers.rollout import (collect_menu_episodes, collect_text_episodes,
                                        trajectory_rewards)
from deciplane.trainers.trainer import Algorithm, Objectives, RolloutBatch
from deciplane.types import Decision, Trajectory


def group_advantages(estimator: str, rewards: np.ndarray, group_keys: list[str]
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-trajectory advantages from the chosen estimator; returns ``(adv, group_ids)``."""
    keys = {k: i for i, k in enumerate(dict.fromkeys(group_keys))}
    gids = torch.tensor([keys[k] for k in group_keys], dtype=torch.long)          # (N,)
    r = torch.as_tensor(rewards, dtype=torch.float32)                            # (N,)
    return ADVANTAGE_ESTIMATORS[estimator](r, gids), gids


# ---------------------------------------------------------------------------------------
# RLiD: PPO on menu decisions (+ CORD distillation, + BC warm start)
# ---------------------------------------------------------------------------------------


@dataclass
class DecisionBatch:
    """Flattened decisions of a rollout, with everything the loss needs (all detached)."""

    decisions: list[Decision]
    actions: torch.Tensor        # (N,) chosen index
    old_logp: torch.Tensor       # (N,) old log-prob of the chosen index
    advantages: torch.Tensor     # (N,) the episode's (or, gae, the turn's) advantage
    episode_ids: torch.Tensor    # (N,)
    weights: torch.Tensor        # (N,) length-balanced weights over the whole batch
    menu_keys: list[tuple[str, ...]]
    expert: list[int | None]     # env expert's menu index per decision
    returns: torch.Tensor | None = None     # (N,) gae: the value head's regression target
    old_values: torch.Tensor | None = None  # (N,) gae: V(s) at rollout time (value clip)


def flatten_decisions(trajs: list[Trajectory], adv: torch.Tensor, length_balanced: bool
                      ) -> DecisionBatch:
    """Decisions in episode-major order; ``adv`` is one advantage per episode ``(E,)`` or
    one per turn ``(E, T)`` (right padded, as :func:`deciplane.objectives.advantages.gae`
    returns them)."""
    from deciplane.objectives.rlid import length_balanced_weights

    decisions, acts, old, advs, eps, keys, expert = [], [], [], [], [], [], []
    for e, tr in enumerate(trajs):
        for j, t in enumerate(tr.turns):
            d = t.decision
            decisions.append(d)
            acts.append(d.index)
            old.append(float(d.log_probs[d.index]))
            advs.append(float(adv[e] if adv.dim() == 1 else adv[e, j]))
            eps.append(e)
            keys.append(tuple(d.labels))
            expert.append(t.expert_index)
    ep = torch.tensor(eps, dtype=torch.long)
    w = (length_balanced_weights(ep) if length_balanced and len(eps)
         else torch.ones(len(eps)))
    return DecisionBatch(decisions, torch.tensor(acts, dtype=torch.long),
                         torch.tensor(old, dtype=torch.float32),
                         torch.tensor(advs, dtype=torch.float32), ep, w, keys, expert)


def pad_menu_log_probs(rows: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack ``(K_i,)`` menu log-probs into ``(N, Kmax)`` plus the menu mask."""
    kmax = max(int(r.shape[0]) for r in rows)
    lp = torch.stack([torch.nn.functional.pad(r, (0, kmax - r.shape[0]), value=-1e9)
                      for r in rows])                                             # (N, K)
    mask = torch.stack([torch.arange(kmax) < r.shape[0] for r in rows])          # (N, K)
    return lp, mask


def menu_ids(keys: list[tuple[str, ...]]) -> torch.Tensor:
    index = {k: i for i, k in enumerate(dict.fromkeys(keys))}
    return torch.tensor([index[k] for k in keys], dtype=torch.long)


def expert_distill_loss(log_probs: torch.Tensor, expert: list[int | None]
                        ) -> tuple[torch.Tensor, int]:
    """``KL(onehot(expert) || pi) = -log pi(expert|s)`` summed over decisions that have an
    expert action; returns ``(sum, count)``."""
    rows = [i for i, e in enumerate(expert) if e is not None]
    if not rows:
        return log_probs.sum() * 0.0, 0
    idx = torch.tensor(rows)
    tgt = torch.tensor([expert[i] for i in rows], dtype=torch.long)
    return -log_probs[idx].gather(1, tgt[:, None]).sum(), len(rows)


def policy_distill_loss(log_probs: torch.Tensor, teacher_log_probs: torch.Tensor,
                        mask: torch.Tensor) -> torch.Tensor:
    """``sum_i KL(pi_teacher(.|s_i) || pi(.|s_i))`` over the menu slots: scalar."""
    pt = teacher_log_probs.exp()
    kl = torch.where(mask, pt * (teacher_log_probs - log_probs), torch.zeros_like(pt))
    return kl.sum()


class MenuPPO(Algorithm):
    """RLiD-PPO for the decision-plane menu agent (METHODS §1, §3)."""

    config: RLiDPPOConfig

    def __init__(self, config: RLiDPPOConfig, policy: Any) -> None:
        super().__init__(config, policy)
        from deciplane.agents import MenuAgent
        from deciplane.objectives.rlid import RLiDConfig

        c = config
        self.agent = MenuAgent(policy, temperature=c.temperature, history=c.history)
        self.eval_agent = MenuAgent(policy, greedy=True, history=c.history)
        self.suite = EnvSuite(c.env, expert=c.distill.enabled or c.bc.episodes > 0,
                              workers=c.env_workers)
        self.rlid = RLiDConfig(eps_low=c.clip_eps, eps_high=c.clip_eps_high,
                               length_balance=c.length_balanced, bias_control=c.bias_control,
                               beta_menu=c.beta_menu, entropy_coef=c.entropy_coef)
        self.critic = None
        if c.advantage == "gae":
            from deciplane.trainers.critic import Critic

            self.critic = Critic(policy, detach_trunk=c.value_detach_trunk)
        self.teacher = None
        if c.distill.enabled and c.distill.teacher == "policy":
            from deciplane.agents import load_policy

            tp = load_policy(c.distill.teacher_model)
            tp.model.eval()
            for p in tp.model.parameters():
                p.requires_grad_(False)
            self.teacher = MenuAgent(tp, greedy=True, history=c.history)

    def distill_config(self) -> DistillConfig | None:
        return self.config.distill

    def trainable_modules(self) -> dict[str, tuple[torch.nn.Module, float | None]]:
        if self.critic is None:
            return {}
        return {"value_head": (self.critic.head, self.config.value_lr)}

    def split_fingerprints(self) -> dict[str, str]:
        return self.suite.fingerprints()

    def rollout(self, iteration: int, seed: int) -> RolloutBatch:
        c = self.config
        vec, reset_seeds = self.suite.train_batch(seed)
        self.policy.model.eval()
        with torch.no_grad():
            trajs, stats = collect_menu_episodes(self.agent, vec, reset_seeds,
                                                 c.env.group_size, c.env.max_episode_steps,
                                                 seed)
        self.policy.model.train()
        rewards = trajectory_rewards(trajs, c.reward, c.step_penalty)
        metrics = stats.metrics()
        metrics["rollout/reward"] = float(rewards.mean())
        if self.critic is not None:
            data, m = self.gae_batch(trajs)
            metrics.update(m)
            # even with all-equal rewards the critic's errors give non-zero advantages and
            # the value head has targets: never a skipped step
            degenerate = not data.decisions
        else:
            adv, gids = group_advantages(c.advantage, rewards, [t.group_id for t in trajs])
            data = flatten_decisions(trajs, adv, c.length_balanced)
            metrics["rollout/adv_abs"] = float(adv.abs().mean())
            degenerate = is_degenerate_batch(torch.as_tensor(rewards), gids)
        return RolloutBatch(n_units=len(data.decisions), data=data, env_steps=stats.env_steps,
                            episodes=stats.episodes, degenerate=degenerate, metrics=metrics)

    def gae_batch(self, trajs: list[Trajectory]) -> tuple[DecisionBatch, dict[str, float]]:
        """advantage=gae: values of every visited state from the value head (no grad, the
        current weights), per-turn rewards, GAE(gamma, gae_lambda) per turn, flattened to
        one advantage and one return per decision."""
        from deciplane.trainers.critic import (explained_variance, flat_to_turns,
                                               gae_advantages, turn_rewards)

        c = self.config
        decs = [t.decision for tr in trajs for t in tr.turns]
        values = self.critic.values(self.agent, decs, c.optim.micro_batch_size)   # (N,)
        rewards, mask = turn_rewards(trajs, c.reward, c.step_penalty)             # (B, T)
        v = flat_to_turns(values, [len(tr) for tr in trajs])                      # (B, T)
        adv, ret = gae_advantages(rewards, v, mask, c.gamma, c.gae_lambda,
                                  normalize=c.gae_normalize)                      # (B, T)
        data = flatten_decisions(trajs, adv, c.length_balanced)
        data.returns = ret[mask]                                                  # (N,)
        data.old_values = values.detach().float()                                 # (N,)
        m = {"rollout/adv_abs": float(data.advantages.abs().mean()) if decs else 0.0,
             "critic/value_mean": float(values.mean()) if decs else 0.0,
             "critic/return_mean": float(data.returns.mean()) if decs else 0.0,
             "critic/explained_variance": explained_variance(values, data.returns)}
        return data, m

    def loss(self, batch: RolloutBatch, micro: list[int], optimizer_batch: list[int]
             ) -> Objectives:
        from deciplane.objectives.rlid import rlid_loss

        d: DecisionBatch = batch.data
        decs = [d.decisions[i] for i in micro]
        values = None
        if self.critic is None:
            log_probs = self.agent.menu_log_probs(decs)
        else:  # the same forward pass gives the values
            log_probs, values = self.critic.score(self.agent, decs)              # (n,)
        lp, mask = pad_menu_log_probs(log_probs)                                 # (n, K)
        idx = torch.tensor(micro)
        out = rlid_loss(self.rlid, lp, d.actions[idx], d.old_logp[idx], d.advantages[idx],
                        d.episode_ids[idx], mask, menu_ids([d.menu_keys[i] for i in micro]),
                        weights=d.weights[idx])
        share = len(micro) / len(optimizer_batch)
        metrics = dict(out.metrics)
        task = out.loss
        if values is not None:
            from deciplane.trainers.critic import value_loss

            vl = value_loss(values, d.old_values[idx], d.returns[idx], self.config.value_clip)
            task = task + self.config.value_coef * vl
            metrics["loss/value"] = float(vl.detach())
        distill = None
        if self.config.distill.enabled:
            distill, m = self._distill(lp.float(), mask, decs, d, micro, optimizer_batch)
            metrics.update(m)
        return Objectives(task=task * share, distill=distill, metrics=metrics)

    def _distill(self, lp: torch.Tensor, mask: torch.Tensor, decs: list[Decision],
                 d: DecisionBatch, micro: list[int], optimizer_batch: list[int]
                 ) -> tuple[torch.Tensor, dict[str, float]]:
        """Distillation on the student's own visited states, as a mean over the optimizer
        batch's decisions that have a teacher target."""
        if self.config.distill.teacher == "expert":
            total = sum(d.expert[i] is not None for i in optimizer_batch)
            s, n = expert_distill_loss(lp, [d.expert[i] for i in micro])
            agree = [int(lp[j].argmax()) == d.expert[i] for j, i in enumerate(micro)
                     if d.expert[i] is not None]
            m = {"distill/expert_agreement": float(np.mean(agree)) if agree else 0.0}
        else:
            with torch.no_grad():
                t_lp, _ = pad_menu_log_probs(self.teacher.menu_log_probs(decs))
            total = len(optimizer_batch)
            s = policy_distill_loss(lp, t_lp.float(), mask)
            m = {}
        loss = s / max(total, 1)
        m["loss/distill"] = float(loss.detach()) * len(optimizer_batch) / max(len(micro), 1)
        return loss, m

    def warm_start(self, optimizer: torch.optim.Optimizer) -> dict[str, Any] | None:
        """Behaviour cloning on expert episodes (the env's expert actions), if configured."""
        c = self.config
        if c.bc.episodes <= 0:
            return None
        from deciplane.trainers.checkpoint import iteration_seed

        seed = iteration_seed(c.seed, -1, "bc")
        self.policy.model.eval()
        trajs, stats = collect_bc_episodes(self.suite, self.agent, c.bc.episodes,
                                           c.env.max_episode_steps, seed)
        self.policy.model.train()
        decs = [t.decision for tr in trajs for t in tr.turns]
        targets = [t.expert_index for tr in trajs for t in tr.turns]
        params = [p for g in optimizer.param_groups for p in g["params"]]

        def loss_fn(part: list[int]) -> torch.Tensor:
            lp, _ = pad_menu_log_probs(self.agent.menu_log_probs([decs[i] for i in part]))
            loss, n = expert_distill_loss(lp.float(), [targets[i] for i in part])
            return loss / max(n, 1)

        losses = run_bc_epochs(len(decs), loss_fn, params, lr=c.bc.lr, epochs=c.bc.epochs,
                               micro_batch_size=c.optim.micro_batch_size,
                               max_grad_norm=c.optim.max_grad_norm, seed=seed)
        return {"kind": "behaviour cloning on env expert actions", "episodes": len(trajs),
                "decisions": len(decs), "epochs": c.bc.epochs, "env_steps": stats.env_steps,
                "final_loss": losses[-1] if losses else None}

    def evaluate(self, split: str) -> dict[str, float]:
        return self.suite.evaluate(self.eval_agent, split, self.config.eval.episodes,
                                   collect_menu_episodes, model=self.policy.model)

    def close(self) -> None:
        self.suite.close()


# ---------------------------------------------------------------------------------------
# Free-text agent: token PPO or TLM-DRE
# ---------------------------------------------------------------------------------------


@dataclass
class TextBatch:
    trajs: list[Trajectory]
    advantages: torch.Tensor     # (N,) per trajectory
    n_tokens: list[int]          # response tokens per trajectory


class _PromptRecorder:
    """Stands in for a :class:`~deciplane.agents.TextAgent` while the env expert plays:
    its "decision" in each state is the prompt text the agent would see there (observation,
    menu, history of expert commands) — no generation."""

    def __init__(self, agent: Any) -> None:
        self.agent = agent

    def act(self, observations: list[str], menus: list[Any],
            histories: list[list[tuple[str, str]]] | None = None, seed: int | None = None
            ) -> list[str]:
        hists = histories or [None] * len(observations)
        return [self.agent.prompt(o, m, h) for o, m, h in zip(observations, menus, hists)]


def expert_command_ids(policy: Any, command: str, style: str) -> torch.Tensor:
    """``(R,)`` token ids of the response the text agent should generate for ``command``:
    the command itself (``style="action"``) or ``<action>command</action>`` (``react``,
    no reasoning), then the tokenizer's end-of-sequence token so the agent learns to stop."""
    text = command if style == "action" else f"<action>{command}</action>"
    ids = list(policy.tokenizer(text, add_special_tokens=False)["input_ids"])
    eos = policy.tokenizer.eos_token_id
    if eos is not None:
        ids.append(int(eos))
    return torch.tensor(ids, dtype=torch.long)


def text_bc_loss(policy: Any, prompt_ids: list[torch.Tensor], target_ids: list[torch.Tensor]
                 ) -> torch.Tensor:
    """Mean per-token negative log-likelihood of the targets given their prompts (teacher
    forcing, temperature 1, with grad), over all target tokens of the micro-batch."""
    from deciplane.trainers.single_turn import forward_responses

    fwd = forward_responses(policy, prompt_ids, target_ids, temperature=1.0)
    mask = fwd.mask.to(fwd.logp.dtype)
    return -(fwd.logp * mask).sum() / mask.sum().clamp(min=1.0)


def collect_bc_episodes(suite: EnvSuite, agent: Any, episodes: int, max_steps: int, seed: int
                        ) -> tuple[list[Trajectory], Any]:
    """``episodes`` expert-played training episodes (``collect_expert_episodes``), drawn in
    chunks of the rollout vector env's size; each turn's ``decision`` is what ``agent``
    returned in that state, ``action`` the expert's command. Returns ``(trajs, stats)``."""
    from deciplane.trainers.rollout import collect_expert_episodes

    trajs: list[Trajectory] = []
    stats = None
    while len(trajs) < episodes:
        vec, seeds = suite.train_batch(seed + len(trajs), episodes="rollout")
        with torch.no_grad():
            part, st = collect_expert_episodes(agent, vec, seeds, max_steps, seed + len(trajs))
        trajs += part[:episodes - len(trajs)]
        stats = st if stats is None else stats.merge(st)
    return trajs, stats


def run_bc_epochs(n: int, loss_fn: Callable[[list[int]], torch.Tensor],
                  params: list[torch.nn.Parameter], *, lr: float, epochs: int,
                  micro_batch_size: int, max_grad_norm: float, seed: int) -> list[float]:
    """``epochs`` shuffled passes over ``n`` units, one AdamW step (fresh optimizer at
    ``lr``, gradient clipping) per micro-batch of ``loss_fn(indices)``; returns the losses."""
    opt = torch.optim.AdamW(params, lr=lr)
    gen = torch.Generator().manual_seed(seed % (2**63))
    losses: list[float] = []
    for _ in range(epochs):
        perm = torch.randperm(n, generator=gen).tolist()
        for s in range(0, n, micro_batch_size):
            loss = loss_fn(perm[s:s + micro_batch_size])
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, max_grad_norm or float("inf"))
            opt.step()
            losses.append(float(loss.detach()))
    for p in params:
        p.grad = None
    return losses


class TextPPO(Algorithm):
    """Free-text agent, trajectory-level units: every turn's response tokens are scored
    under their own prompt and concatenated with a token-to-turn id tensor."""

    config: TextPPOConfig

    def __init__(self, config: TextPPOConfig, policy: Any) -> None:
        super().__init__(config, policy)
        from deciplane.agents import TextAgent
        from deciplane.objectives.policy_loss import PolicyLossConfig
        from deciplane.objectives.tlm_dre import TLMDREConfig as ObjTLM

        c = config
        self.agent = TextAgent(policy, style=c.style, max_new_tokens=c.max_new_tokens,
                               temperature=c.temperature, history=c.history)
        self.eval_agent = TextAgent(policy, style=c.style, max_new_tokens=c.max_new_tokens,
                                    greedy=True, history=c.history)
        self.suite = EnvSuite(c.env, expert=c.bc.episodes > 0, workers=c.env_workers)
        self.ppo = PolicyLossConfig(eps_low=c.clip_eps, eps_high=c.clip_eps_high,
                                    aggregation="token_mean")
        t = c.tlm_dre
        self.tlm = ObjTLM(tau=t.tau, s_min=t.s_min, s_max=t.s_max, alpha_pos=t.alpha_pos,
                          alpha_neg=t.alpha_neg, eps_low_pos=t.eps_low_pos,
                          eps_high_pos=t.eps_high_pos, eps_low_neg=t.eps_low_neg,
                          eps_high_neg=t.eps_high_neg)

    def split_fingerprints(self) -> dict[str, str]:
        return self.suite.fingerprints()

    def rollout(self, iteration: int, seed: int) -> RolloutBatch:
        c = self.config
        vec, reset_seeds = self.suite.train_batch(seed)
        self.policy.model.eval()
        with torch.no_grad():
            trajs, stats = collect_text_episodes(self.agent, vec, reset_seeds, c.env.group_size,
                                                 c.env.max_episode_steps, seed)
        self.policy.model.train()
        rewards = trajectory_rewards(trajs, c.reward, c.step_penalty, c.invalid_penalty)
        adv, gids = group_advantages(c.advantage, rewards, [t.group_id for t in trajs])
        ntok = [sum(int(t.response_ids.numel()) for t in tr.turns) for tr in trajs]
        metrics = stats.metrics()
        metrics["rollout/reward"] = float(rewards.mean())
        metrics["rollout/tokens_per_turn"] = sum(ntok) / max(1, stats.env_steps)
        return RolloutBatch(n_units=len(trajs), data=TextBatch(trajs, adv, ntok),
                            env_steps=stats.env_steps, episodes=stats.episodes,
                            degenerate=is_degenerate_batch(torch.as_tensor(rewards), gids),
                            metrics=metrics)

    def _token_tensors(self, trajs: list[Trajectory], model: Any | None = None
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Current (or ``model``'s) log-probs ``(B, T)``, old log-probs ``(B, T)`` and turn ids
        ``(B, T)`` (-1 on padding) of the trajectories' concatenated response tokens."""
        prompts = [t.prompt_ids for tr in trajs for t in tr.turns]
        resps = [t.response_ids for tr in trajs for t in tr.turns]
        per_turn = self.policy.sequence_logprobs(prompts, resps,
                                                 temperature=self.config.temperature,
                                                 model=model)
        tmax = max(1, max(sum(int(t.response_ids.numel()) for t in tr.turns) for tr in trajs))
        b = len(trajs)
        logp = torch.zeros(b, tmax)
        old = torch.zeros(b, tmax)
        tid = torch.full((b, tmax), -1, dtype=torch.long)
        rows_lp: list[list[torch.Tensor]] = [[] for _ in range(b)]
        k = 0
        for i, tr in enumerate(trajs):
            pos = 0
            for j, t in enumerate(tr.turns):
                n = int(t.response_ids.numel())
                rows_lp[i].append(per_turn[k])
                old[i, pos:pos + n] = t.response_logprobs.float()
                tid[i, pos:pos + n] = j
                pos += n
                k += 1
        logp = torch.stack([torch.nn.functional.pad(torch.cat(r) if r else torch.zeros(0),
                                                    (0, tmax - sum(x.numel() for x in r)))
                            for r in rows_lp])                                    # (B, T)
        return logp.float(), old, tid

    def loss(self, batch: RolloutBatch, micro: list[int], optimizer_batch: list[int]
             ) -> Objectives:
        from deciplane.objectives.policy_loss import policy_loss
        from deciplane.objectives.tlm_dre import tlm_dre_loss

        data: TextBatch = batch.data
        trajs = [data.trajs[i] for i in micro]
        adv = data.advantages[torch.tensor(micro)]                                # (B,)
        logp, old, tid = self._token_tensors(trajs)
        if self.config.tlm_dre.enabled:
            with torch.no_grad(), self.policy.reference() as ref:
                ref_lp, _, _ = self._token_tensors(trajs, model=ref)
            out = tlm_dre_loss(self.tlm, logp, old, ref_lp, adv, tid)
            share = len(micro) / len(optimizer_batch)  # mean over trajectories
        else:
            out = policy_loss(self.ppo, logp, old, adv, tid >= 0)
            tokens = sum(data.n_tokens[i] for i in micro)
            share = tokens / max(1, sum(data.n_tokens[i] for i in optimizer_batch))
        return Objectives(task=out.loss * share, metrics=dict(out.metrics))

    def warm_start(self, optimizer: torch.optim.Optimizer) -> dict[str, Any] | None:
        """Behaviour cloning on expert episodes, if configured: token-level teacher forcing
        of the expert's command (:func:`expert_command_ids`) on the exact prompt the text
        agent sees in that state; a separate AdamW at ``bc.lr`` over the same parameters."""
        c = self.config
        if c.bc.episodes <= 0:
            return None
        from deciplane.trainers.checkpoint import iteration_seed

        seed = iteration_seed(c.seed, -1, "bc")
        trajs, stats = collect_bc_episodes(self.suite, _PromptRecorder(self.agent),
                                           c.bc.episodes, c.env.max_episode_steps, seed)
        prompts = [self.policy.tokenize(t.decision) for tr in trajs for t in tr.turns]
        targets = [expert_command_ids(self.policy, t.action, c.style)
                   for tr in trajs for t in tr.turns]
        params = [p for g in optimizer.param_groups for p in g["params"]]
        mbs = c.optim.micro_batch_size

        def loss_fn(part: list[int]) -> torch.Tensor:
            return text_bc_loss(self.policy, [prompts[i] for i in part],
                                [targets[i] for i in part])

        losses = run_bc_epochs(len(prompts), loss_fn, params, lr=c.bc.lr, epochs=c.bc.epochs,
                               micro_batch_size=mbs, max_grad_norm=c.optim.max_grad_norm,
                               seed=seed)
        return {"kind": "behaviour cloning on env expert commands (token-level teacher "
                        "forcing)", "episodes": len(trajs), "decisions": len(prompts),
                "tokens": int(sum(int(t.numel()) for t in targets)), "epochs": c.bc.epochs,
                "env_steps": stats.env_steps,
                "first_loss": losses[0] if losses else None,
                "final_loss": losses[-1] if losses else None}

    def evaluate(self, split: str) -> dict[str, float]:
        return self.suite.evaluate(self.eval_agent, split, self.config.eval.episodes,
                                   collect_text_episodes, model=self.policy.model)

    def close(self) -> None:
        self.suite.close()


ALGORITHMS: dict[str, Callable[[Any, Any], Algorithm]] = {
    "rlid_ppo": MenuPPO,
    "text_ppo": TextPPO,
}
"""algorithm name (``config.algorithm``) -> Algorithm class."""


def _register_math() -> None:
    from deciplane.trainers.math_grpo import MathGRPO

    ALGORITHMS["math_grpo"] = MathGRPO


try:  # single-turn GRPO needs deciplane.trainers.single_turn
    _register_math()
except ImportError:  # pragma: no cover - during development only
    pass
