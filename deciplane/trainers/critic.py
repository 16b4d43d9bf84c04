"""The critic for ``advantage: gae`` (docs/methods.md §4): a value head on the policy's own features.

PPO with a critic needs ``V(s_t)`` for every turn of every episode. Here ``V`` is a
:class:`ValueHead` — one ``Linear(hidden, 1)`` — on the policy's **last hidden state at the
end of the turn's prompt**, i.e. the position whose next-token logits score the menu. The
trainer never runs a second model: :class:`LastHidden` captures the input of the policy's
output layer (``lm_head``) during the one forward pass that computes the menu log-probs
(:meth:`deciplane.agents.MenuAgent.menu_log_probs`), so the loss gets log-probs and values
from the same forward. The rollout needs ``V`` of every visited state before the update
(for GAE): the acting forwards keep only label logits behind a shared-prefix KV cache, so
:meth:`Critic.values` runs one extra no-grad scoring forward over the batch's prompts
(measured on the tiny model: rollouts ~30% longer).

The pieces, each small and separately tested:

* :func:`turn_rewards` — per-turn rewards ``(B, T)`` + mask whose row sums are exactly the
  trajectory rewards the group estimators use (:func:`~deciplane.trainers.rollout.trajectory_rewards`);
* :func:`gae_advantages` — :func:`deciplane.objectives.advantages.gae` on them (no
  re-derivation), optionally standardised over the batch's valid turns;
* :func:`value_loss` — the (clipped) value regression ``mean max((V-R)^2, (V_clip-R)^2)``;
* :class:`Critic` — head + capture: values of stored decisions (rollout, no grad) and
  ``(menu log-probs, values)`` with grad (loss). With the items readout the forward stops
  at the item head's layer, so the value head reads the decision state the item head reads
  (:class:`HeadInput`) instead of the output layer's input.

Episode ends: a terminated episode bootstraps with 0; a time-limit truncation is treated
the same way — the limit is part of the task these agents are evaluated on (the state does
not show the time left, so a bootstrap value would be a guess). The value loss trains the
head and, unless ``detach_trunk``, the policy's trainable weights (a shared trunk).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import nn

from deciplane.errors import ConfigError
from deciplane.objectives.advantages import gae
from deciplane.objectives.value import value_loss  # noqa: F401  (moved to objectives in 0.2)
from deciplane.types import Decision, Trajectory


class ValueHead(nn.Module):
    """``V(s) = w . rms(h(s)) + b`` on a hidden state ``h(s)`` of size ``hidden_size``.

    ``rms(h) = h / sqrt(mean(h^2) + 1e-6)`` (no parameters): unit-RMS features whatever
    the model's final-norm scale (measured at the menu cue: RMS ~1.8 with entries up to ~19
    for SmolLM2-135M, ~1.0 for deciplane/tiny). An Adam step of size ``lr`` then moves
    ``V`` by at most about ``lr * ||rms(h)||_1`` (~0.6 H for SmolLM2, ~0.8 H for tiny).
    Initialised to zero (``V = 0`` everywhere before training, independent of the seed),
    computed in float32 whatever the policy's dtype.
    """

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        if hidden_size <= 0:
            raise ConfigError(f"value head hidden_size must be > 0, got {hidden_size}")
        self.linear = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """``(N, H) -> (N,)``."""
        h = hidden.float()                                                        # (N, H)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)               # (N, H)
        return self.linear(h).squeeze(-1)                                         # (N,)


class InputRecorder:
    """While active (``with``), records the first argument of every call of ``module``
    (a forward pre-hook) in ``_calls``."""

    def __init__(self, module: nn.Module) -> None:
        self.module = module
        self._calls: list[torch.Tensor] = []
        self._handle = None

    def __enter__(self):
        self._calls.clear()
        self._handle = self.module.register_forward_pre_hook(self._hook)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def _hook(self, module: nn.Module, args: tuple) -> None:
        self._calls.append(args[0])


class LastHidden(InputRecorder):
    """Capture the last-position hidden state that enters a model's output layer.

    >>> with LastHidden(policy.model) as cap:
    ...     log_probs = agent.menu_log_probs(decisions)   # one forward
    >>> h = cap.hidden                                     # (B, H), with grad

    With left padding (as the menu agent pads) the last position of every row is its
    prompt's last token. Exactly one forward pass must run inside the block.
    """

    def __init__(self, model: nn.Module) -> None:
        head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        if not isinstance(head, nn.Module):
            raise ConfigError(f"{type(model).__name__} has no output layer "
                              "(get_output_embeddings()); advantage=gae needs a causal LM "
                              "with an lm_head — use a group estimator such as grpo")
        super().__init__(head)

    @property
    def hidden(self) -> torch.Tensor:
        """``(B, H)``: the captured forward's hidden state at the last position."""
        if len(self._calls) != 1:
            raise RuntimeError(f"expected one forward pass inside LastHidden, saw "
                               f"{len(self._calls)}; score each batch in its own block")
        return self._calls[0][:, -1, :]                                           # (B, H)


class HeadInput(InputRecorder):
    """Capture the decision states an item head reads (``readout: items``).

    A forward pre-hook on the :class:`~deciplane.agents.readout.ItemHead`: each call's first
    argument is one decision's state ``(H,)`` at the head's layer and the prompt's last
    token; :meth:`states` stacks them ``(n, H)`` in call order (one call per decision, in the
    order :meth:`MenuAgent.menu_log_probs` scores them). The states are those the policy
    reads — kept by the rollout (no grad: a frozen layer) or from a forward with grad (LoRA
    below the head) — so the value head needs no forward of its own.
    """

    def states(self, n: int) -> torch.Tensor:
        """``(n, H)``: the decision states of the ``n`` decisions scored inside the block."""
        if len(self._calls) != n:
            raise RuntimeError(f"the item head ran {len(self._calls)} times for {n} "
                               "decisions; score each batch in its own block")
        return torch.stack(self._calls)                                           # (n, H)


def hidden_size(model: nn.Module) -> int:
    """Width of the hidden state that enters the model's output layer."""
    head = LastHidden(model).module
    n = getattr(head, "in_features", None)
    if n is None:
        raise ConfigError(f"cannot read the hidden size of {type(head).__name__}; "
                          "advantage=gae needs a Linear lm_head")
    return int(n)


# ---------------------------------------------------------------------------------------
# per-turn rewards, GAE, value loss (pure functions)
# ---------------------------------------------------------------------------------------


def turn_rewards(trajs: Sequence[Trajectory], kind: str = "return", step_penalty: float = 0.0,
                 invalid_penalty: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-turn rewards ``(B, T)`` and the valid-turn mask ``(B, T)`` (right padded).

    ``return``: each turn's env reward; ``won``: 1 on the last turn of a won episode.
    Every turn pays ``step_penalty`` and, if invalid, ``invalid_penalty``. Row sums equal
    :func:`~deciplane.trainers.rollout.trajectory_rewards` of the same options.
    """
    if kind not in ("return", "won"):
        raise ConfigError(f"reward={kind!r} is not allowed; allowed values: 'return', 'won'")
    b = len(trajs)
    t_max = max([len(tr) for tr in trajs] + [1])
    rewards = torch.zeros(b, t_max)                                               # (B, T)
    mask = torch.zeros(b, t_max, dtype=torch.bool)                                # (B, T)
    for i, tr in enumerate(trajs):
        n = len(tr)
        for j, turn in enumerate(tr.turns):
            base = float(turn.reward) if kind == "return" else float(tr.won and j == n - 1)
            rewards[i, j] = base - step_penalty - invalid_penalty * float(turn.invalid)
        mask[i, :n] = True
    return rewards, mask


def gae_advantages(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor,
                   gamma: float, lam: float, normalize: bool = False, eps: float = 1e-8
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(advantages, returns)``, both ``(B, T)``, from
    :func:`deciplane.objectives.advantages.gae` (episode ends bootstrap with 0).

    ``normalize`` standardises the advantages over the valid turns of the batch (mean 0,
    std 1; the returns, the critic's targets, are left as they are). Padding stays 0.
    """
    adv, ret = gae(rewards, values, mask, gamma=gamma, lam=lam)                  # (B, T) x2
    m = mask.bool()
    if normalize and int(m.sum()) > 1:
        valid = adv[m]                                                            # (N,)
        adv = torch.where(m, (adv - valid.mean()) / (valid.std() + eps), torch.zeros_like(adv))
    return adv, ret


def explained_variance(values: torch.Tensor, returns: torch.Tensor) -> float:
    """``1 - Var(R - V) / Var(R)``: 1 = perfect critic, 0 = no better than a constant,
    < 0 = worse. NaN when the returns have no variance (or fewer than 2 values)."""
    if returns.numel() < 2:
        return float("nan")
    var = returns.float().var()
    if float(var) == 0.0:
        return float("nan")
    return float(1.0 - (returns.float() - values.float()).var() / var)


def flat_to_turns(flat: torch.Tensor, lengths: Sequence[int]) -> torch.Tensor:
    """Episode-major per-turn values ``(N,)`` -> right-padded ``(B, T)`` (0 on padding)."""
    if int(flat.numel()) != sum(lengths):
        raise ConfigError(f"{flat.numel()} values for {sum(lengths)} turns; pass one per turn")
    out = torch.zeros(len(lengths), max(list(lengths) + [1]), dtype=flat.dtype)   # (B, T)
    pos = 0
    for i, n in enumerate(lengths):
        out[i, :n] = flat[pos:pos + n]
        pos += n
    return out


# ---------------------------------------------------------------------------------------
# the critic of the menu agent
# ---------------------------------------------------------------------------------------


class Critic:
    """A :class:`ValueHead` on the menu agent's prompt-end hidden state.

    Arguments:
        policy: the trained :class:`~deciplane.agents.Policy` (its model supplies features).
        detach_trunk: stop the value loss's gradient at the hidden state (only the head
            learns from it); otherwise it also reaches the policy's trainable weights.
        readout: the menu agent's readout. ``"items"``: the value head reads the decision
            state the policy's item head reads (:class:`HeadInput`: its layer, the prompt's
            last token) — the forward stops at that layer, so there is no output layer to
            read; a head at a frozen layer scores kept states, and only the value head
            learns from the value loss.
    """

    def __init__(self, policy: Any, detach_trunk: bool = False, readout: str = "labels") -> None:
        self.policy = policy
        self.detach_trunk = bool(detach_trunk)
        self.item_head = policy.item_head if readout == "items" else None
        if readout == "items" and self.item_head is None:
            raise ConfigError("advantage=gae with readout=items needs the policy's item head: "
                              "call policy.add_item_head() before building the critic")
        size = (self.item_head.hidden_size if self.item_head is not None
                else hidden_size(policy.model))
        self.head = ValueHead(size).to(policy.device)

    def score(self, agent: Any, decisions: Sequence[Decision]
              ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Menu log-probs (``(K_i,)`` each) and values ``(n,)`` of the decisions' stored
        prompts, from one forward pass, with grad."""
        if self.item_head is not None:
            with HeadInput(self.item_head) as hcap:
                log_probs = agent.menu_log_probs(list(decisions))
            h = hcap.states(len(decisions))                                       # (n, H)
        else:
            with LastHidden(self.policy.model) as cap:
                log_probs = agent.menu_log_probs(list(decisions))
            h = cap.hidden                                                        # (n, H)
        if self.detach_trunk:
            h = h.detach()
        return log_probs, self.head(h).cpu()                                      # (n,)

    @torch.no_grad()
    def values(self, agent: Any, decisions: Sequence[Decision], chunk: int) -> torch.Tensor:
        """``V`` of every decision ``(N,)`` (no grad), ``chunk`` prompts per forward."""
        out = [self.score(agent, decisions[s:s + chunk])[1]
               for s in range(0, len(decisions), max(1, chunk))]
        return torch.cat(out) if out else torch.zeros(0)                          # (N,)
