"""Behaviour-cloning warm starts on the env expert's actions (before RL).

The expert plays training episodes (:func:`collect_bc_episodes`); the agent is then
fitted to the expert's choice in every visited state by :func:`run_bc_epochs` — shuffled
epochs, one engine optimizer step (:mod:`deciplane.engine.optim`, a fresh AdamW at the
warm start's learning rate) per micro-batch. The menu agent's loss is
:func:`deciplane.objectives.distill.expert_distill_loss`, the text agent's the token
negative log-likelihood of the expert's command (:func:`text_bc_loss`).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from deciplane.engine.logprobs import forward_responses
from deciplane.engine.optim import MicroLoss, Normaliser, Optimizer, chunks, optimizer_step
from deciplane.objectives.distill import token_nll
from deciplane.trainers.env_suite import EnvSuite, MultiEnvSuite, member_seed
from deciplane.engine.episodes import collect_expert_episodes
from deciplane.types import Trajectory


class PromptRecorder:
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
    fwd = forward_responses(policy, prompt_ids, target_ids, temperature=1.0)
    return token_nll(fwd.logp, fwd.mask)


def collect_bc_episodes(suite: EnvSuite | MultiEnvSuite, agent: Any, episodes: int,
                        max_steps: int, seed: int, noise: float = 0.0, exact: bool = False
                        ) -> tuple[list[Trajectory], Any]:
    """``episodes`` expert-played training episodes (``collect_expert_episodes``), drawn in
    chunks of the rollout vector env's size; each turn's ``decision`` is what ``agent``
    returned in that state, ``action`` the command played (the expert's, unless ``noise``
    played a random one: the label is then ``expert_index``). Returns ``(trajs, stats)``.

    A suite shares the episodes by weight among its envs with an expert
    (:meth:`MultiEnvSuite.expert_shares`), each at its own step cap (``max_steps`` is
    then unused), and interleaves them (the first episode of every env, then the second
    ...), so that a held-out tail of the list holds every env. ``exact``: the last chunk
    plays only the episodes still wanted (a suite's shares are rarely a multiple of the
    vector env's size; one env keeps playing whole chunks, as it always did)."""
    if isinstance(suite, MultiEnvSuite):
        return _collect_suite_bc(suite, agent, episodes, seed, noise)
    trajs: list[Trajectory] = []
    stats = None
    while len(trajs) < episodes:
        vec, seeds = suite.train_batch(seed + len(trajs), episodes="rollout")
        if exact:
            seeds = seeds[:episodes - len(trajs)]
        with torch.no_grad():
            part, st = collect_expert_episodes(agent, vec, seeds, max_steps, seed + len(trajs),
                                               noise=noise)
        trajs += part[:episodes - len(trajs)]
        stats = st if stats is None else stats.merge(st)
    return trajs, stats


def _collect_suite_bc(suite: MultiEnvSuite, agent: Any, episodes: int, seed: int,
                      noise: float) -> tuple[list[Trajectory], Any]:
    per_env: list[list[Trajectory]] = []
    stats = None
    for i, (name, n) in enumerate(suite.expert_shares(episodes).items()):
        if n == 0:
            continue
        member = suite.member(name)
        part, st = collect_bc_episodes(member, agent, n, member.cfg.max_episode_steps,
                                       member_seed(seed, i), noise=noise, exact=True)
        for t in part:
            t.meta["env"] = name
        per_env.append(part)
        stats = st if stats is None else stats.merge(st)
    longest = max((len(p) for p in per_env), default=0)
    trajs = [p[k] for k in range(longest) for p in per_env if k < len(p)]
    return trajs, stats


ADAMW_DEFAULT_WEIGHT_DECAY = 0.01
"""The warm start's AdamW uses torch's default weight decay (as in 0.1)."""


class EarlyStopping:
    """Stop when a validation score (higher is better) has not improved for ``patience``
    evaluations. ``update(score)`` returns whether to go on; ``best_epoch`` (1-based, 0 =
    the score before any epoch) and ``best`` name the best so far. Example, patience 2:
    scores ``-3, -2, -2.5, -2.1`` -> go on, go on, stop after the 4th (best epoch 2)."""

    def __init__(self, patience: int, initial: float | None = None) -> None:
        if patience < 1:
            raise ValueError(f"patience must be >= 1, got {patience}")
        self.patience = int(patience)
        self.best = float("-inf") if initial is None else float(initial)
        self.best_epoch = 0
        self.epoch = 0

    def update(self, score: float) -> bool:
        self.epoch += 1
        if score > self.best:
            self.best, self.best_epoch = float(score), self.epoch
        return self.epoch - self.best_epoch < self.patience

    @property
    def improved(self) -> bool:
        """The last update set a new best."""
        return self.best_epoch == self.epoch


def run_bc_epochs(n: int, loss_fn: Callable[[list[int]], torch.Tensor],
                  params: list[torch.nn.Parameter], *, lr: float, epochs: int,
                  micro_batch_size: int, max_grad_norm: float, seed: int,
                  on_epoch: Callable[[int, int, float], bool] | None = None,
                  validate: Callable[[], float] | None = None, patience: int = 3,
                  curve: list[dict[str, float]] | None = None) -> list[float]:
    """``epochs`` shuffled passes over ``n`` units, one optimizer step (a fresh AdamW at
    ``lr`` over ``params`` as one group, gradient clipping) per micro-batch of
    ``loss_fn(indices)`` (a mean over the micro-batch); returns the losses.

    ``on_epoch(done, epochs, mean_loss)``, if given, is called once with ``done=0`` before
    the first epoch (the epochs start: their timing must not include collecting the expert
    episodes) and after every epoch; returning ``False`` after an epoch stops the warm start
    there (the trainer's time plan).

    ``validate()``, if given, scores the current weights on held-out data (higher is
    better) before the first epoch and after each one; training stops once it has not
    improved for ``patience`` epochs, and the best-scoring weights are put back (the
    epoch-0 weights if no epoch helped). ``curve`` receives ``{"epoch", "loss", "valid"}``
    per epoch."""
    stopper = best_state = None
    if validate is not None:
        stopper = EarlyStopping(patience, initial=validate())
        best_state = [p.detach().clone() for p in params]
        if curve is not None:
            curve.append({"epoch": 0, "loss": float("nan"), "valid": stopper.best})
    opt = Optimizer(params, lr=lr, weight_decay=ADAMW_DEFAULT_WEIGHT_DECAY,
                    max_grad_norm=max_grad_norm)
    gen = torch.Generator().manual_seed(seed % (2**63))
    losses: list[float] = []

    def micro_loss(part: list[int]) -> MicroLoss:
        loss = loss_fn(part)
        losses.append(float(loss.detach()))
        return MicroLoss(task=loss)

    if on_epoch is not None:   # epoch 0: the epochs start now (timing starts here)
        on_epoch(0, epochs, float("nan"))
    for epoch in range(epochs):
        perm = torch.randperm(n, generator=gen).tolist()
        first = len(losses)
        for part in chunks(perm, micro_batch_size):
            # each micro-batch is its own optimizer batch: share 1
            optimizer_step(opt, part, len(part), micro_loss, Normaliser([1] * n))
        mean = sum(losses[first:]) / max(1, len(losses) - first)
        go_on = True
        if stopper is not None:
            score = validate()
            go_on = stopper.update(score)
            if stopper.improved:
                best_state = [p.detach().clone() for p in params]
            if curve is not None:
                curve.append({"epoch": epoch + 1, "loss": mean, "valid": score})
        if on_epoch is not None and not on_epoch(epoch + 1, epochs, mean):
            break
        if not go_on:
            break
    opt.zero_grad()
    if best_state is not None:   # the weights of the best validation score
        with torch.no_grad():
            for p, b in zip(params, best_state):
                p.copy_(b)
    return losses


__all__ = ["EarlyStopping", "PromptRecorder", "collect_bc_episodes", "expert_command_ids", "run_bc_epochs", "text_bc_loss"]
