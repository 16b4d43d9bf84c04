"""The one episode loop over ``gymnasium.vector`` environments (training rollouts and the
trainers' held-out evaluation).

Episodes are *grouped*: every iteration picks ``games_per_iteration`` initial states (a
reset seed each, derived from ``(seed, iteration)``) and plays ``group_size`` episodes
from each, all in one ``SyncVectorEnv`` so that the agent decides for every live episode
in one batched forward pass. Episodes of the same initial state share a ``group_id`` —
the group of the group baseline (GRPO/RLOO...).

Two episode kinds:

* :func:`collect_menu_episodes` — decision-plane (RLiD) agents; each turn stores the
  :class:`~deciplane.types.Decision` (old log-probs on the exact menu) and the env expert's
  menu index when the env offers one (``info["expert_action"]``, for distillation/BC);
* :func:`collect_text_episodes` — free-text agents; each turn stores prompt/response token
  ids and the old per-token log-probs, so token losses keep the turn id of every token
  (TLM-DRE). An unmatched command is an *invalid turn*: the env gets a masked menu index
  (no state change, reward 0), the turn is counted and can be penalised.

All randomness (reset seeds, sampling) is a function of the seeds passed in, so a rollout
is reproducible from ``(seed, iteration)`` and the current weights alone.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import gymnasium as gym
import numpy as np

from deciplane.types import Menu, Trajectory, Turn

EnvFactory = Callable[[], gym.Env]


@dataclass
class RolloutStats:
    """What a rollout cost and how it went."""

    env_steps: int = 0
    episodes: int = 0
    won: int = 0
    invalid: int = 0
    return_sum: float = 0.0
    length_sum: int = 0

    def merge(self, other: "RolloutStats") -> "RolloutStats":
        return RolloutStats(*(getattr(self, f) + getattr(other, f) for f in
                              ("env_steps", "episodes", "won", "invalid", "return_sum",
                               "length_sum")))

    def metrics(self, prefix: str = "rollout") -> dict[str, float]:
        n = max(1, self.episodes)
        return {f"{prefix}/success": self.won / n, f"{prefix}/return": self.return_sum / n,
                f"{prefix}/episode_len": self.length_sum / n,
                f"{prefix}/invalid_rate": self.invalid / max(1, self.env_steps),
                f"{prefix}/episodes": float(self.episodes)}


def make_vector_env(env_fns: Sequence[EnvFactory]) -> gym.vector.SyncVectorEnv:
    """A ``SyncVectorEnv`` with next-step autoreset (finished slots are simply ignored)."""
    return gym.vector.SyncVectorEnv(list(env_fns), copy=False,
                                    autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)


def _info_at(infos: dict[str, Any], key: str, i: int, default: Any = None) -> Any:
    """Value of ``key`` for sub-env ``i`` in a vector env's info dict."""
    if key not in infos:
        return default
    present = infos.get("_" + key)
    if present is not None and not bool(present[i]):
        return default
    v = infos[key][i]
    return v.item() if isinstance(v, np.generic) else v


def _menu_at(infos: dict[str, Any], i: int) -> Menu:
    m = _info_at(infos, "menu", i)
    if m is None:
        raise KeyError("the environment returned no info['menu']; menu and text agents "
                       "need the menu contract of deciplane/TextWorld-v0")
    return m if isinstance(m, Menu) else Menu(tuple(m))


class _Slot:
    """One episode being played in one sub-env."""

    def __init__(self, group_id: str, meta: dict[str, Any]) -> None:
        self.turns: list[Turn] = []
        self.group_id = group_id
        self.meta = meta
        self.done = False
        self.won = False
        self.truncated = False
        self.obs = ""
        self.menu: Menu | None = None
        self.expert: int | None = None
        self.history: list[tuple[str, str]] = []   # (observation, action) of past turns

    def trajectory(self) -> Trajectory:
        return Trajectory(turns=self.turns, group_id=self.group_id, won=self.won,
                          truncated=self.truncated, meta=dict(self.meta))


def _episodes(vec: gym.vector.VectorEnv, reset_seeds: Sequence[int], group_size: int,
              max_steps: int, act: Callable[[list[_Slot], list[int], int], list[int]],
              group_prefix: str, step_seed: int) -> tuple[list[Trajectory], RolloutStats]:
    """Play ``len(reset_seeds) * group_size`` episodes in ``vec`` (which must have exactly
    that many sub-envs). ``act(slots, live_indices, turn_seed)`` fills each live slot's new
    turn and returns the env actions."""
    n = len(reset_seeds) * group_size
    if vec.num_envs != n:
        raise ValueError(f"vector env has {vec.num_envs} sub-envs but {n} episodes were "
                         "requested; build it with games_per_iteration * group_size envs")
    seeds = [int(s) for s in reset_seeds for _ in range(group_size)]
    slots = [_Slot(f"{group_prefix}{s}", {"reset_seed": s}) for s in seeds]
    obs, infos = vec.reset(seed=seeds)
    for i, slot in enumerate(slots):
        slot.obs = str(obs[i])
        slot.menu = _menu_at(infos, i)
        slot.expert = _info_at(infos, "expert_action", i)
        game = _info_at(infos, "game", i)
        if game is not None:
            slot.meta["game"] = str(game)
    stats = RolloutStats()
    for t in range(max_steps):
        live = [i for i, s in enumerate(slots) if not s.done]
        if not live:
            break
        actions = act(slots, live, (step_seed + 1_000_003 * (t + 1)) % (2**63 - 1))
        full = np.zeros(n, dtype=np.int64)
        for i, a in zip(live, actions):
            full[i] = a
        obs, rewards, terms, truncs, infos = vec.step(full)
        for i in live:
            slot = slots[i]
            turn = slot.turns[-1]
            turn.reward = float(rewards[i])
            turn.info["invalid_action"] = bool(_info_at(infos, "invalid_action", i, False))
            stats.env_steps += 1
            stats.invalid += int(turn.invalid)
            slot.history.append((slot.obs, turn.action))
            slot.obs = str(obs[i])
            won = bool(_info_at(infos, "won", i, False))
            if terms[i] or truncs[i] or t == max_steps - 1:
                slot.done = True
                slot.won = won
                slot.truncated = bool(truncs[i]) or (not terms[i])
            else:
                slot.menu = _menu_at(infos, i)
                slot.expert = _info_at(infos, "expert_action", i)
    trajs = [s.trajectory() for s in slots]
    for tr in trajs:
        stats.episodes += 1
        stats.won += int(tr.won)
        stats.return_sum += tr.total_reward
        stats.length_sum += len(tr)
    return trajs, stats


def collect_menu_episodes(agent: Any, vec: gym.vector.VectorEnv, reset_seeds: Sequence[int],
                          group_size: int, max_steps: int, seed: int,
                          greedy: bool = False) -> tuple[list[Trajectory], RolloutStats]:
    """Grouped episodes with a decision-plane agent (``MenuAgent``).

    Each turn stores the Decision (old log-probs over the exact menu) and, when the env
    offers it, the expert's menu index (``Turn.expert_index``).
    """

    def act(slots: list[_Slot], live: list[int], turn_seed: int) -> list[int]:
        sl = [slots[i] for i in live]
        decisions = agent.act([s.obs for s in sl], [s.menu for s in sl],
                              histories=[list(s.history) for s in sl], seed=turn_seed)
        out = []
        for s, d in zip(sl, decisions):
            s.turns.append(Turn(observation=s.obs, action=d.action, reward=0.0, decision=d,
                                expert_index=None if s.expert is None else int(s.expert)))
            out.append(int(d.index))
        return out

    return _episodes(vec, reset_seeds, group_size, max_steps, act, "g", seed)


def collect_expert_episodes(agent: Any, vec: gym.vector.VectorEnv, reset_seeds: Sequence[int],
                            max_steps: int, seed: int, noise: float = 0.0
                            ) -> tuple[list[Trajectory], RolloutStats]:
    """Episodes that follow the env expert (``info["expert_action"]``), one per reset seed,
    recording the agent's Decision record of every visited state (for behaviour cloning:
    the target is ``Turn.expert_index``).

    ``noise`` > 0: at each step, with that probability, a uniformly random legal action is
    played instead of the expert's (the label stays the expert's choice) — the data then
    shows how the expert recovers from a mistake (DART-style noise injection, Laskey et
    al. 2017). A state where the expert has no action (off a fixed gold path) is played at
    random and recorded without a label (``expert_index=None``)."""
    rng = random.Random(seed)

    def act(slots: list[_Slot], live: list[int], turn_seed: int) -> list[int]:
        sl = [slots[i] for i in live]
        decisions = agent.act([s.obs for s in sl], [s.menu for s in sl],
                              histories=[list(s.history) for s in sl], seed=turn_seed)
        out = []
        for s, d in zip(sl, decisions):
            if s.expert is None and noise <= 0:
                raise KeyError("behaviour cloning needs info['expert_action']; build the env "
                               "with expert=True (TextWorld-v0) or disable the warm start")
            e = None if s.expert is None else int(s.expert)
            played = e if e is not None and rng.random() >= noise else rng.randrange(len(s.menu))
            s.turns.append(Turn(observation=s.obs, action=s.menu[played], reward=0.0,
                                decision=d, expert_index=e))
            out.append(played)
        return out

    return _episodes(vec, reset_seeds, 1, max_steps, act, "x", seed)


def collect_text_episodes(agent: Any, vec: gym.vector.VectorEnv, reset_seeds: Sequence[int],
                          group_size: int, max_steps: int, seed: int
                          ) -> tuple[list[Trajectory], RolloutStats]:
    """Grouped episodes with a free-text agent (``TextAgent``): token ids + old token
    log-probs per turn; an unmatched command is an invalid turn (masked index, no change)."""

    def act(slots: list[_Slot], live: list[int], turn_seed: int) -> list[int]:
        sl = [slots[i] for i in live]
        decisions = agent.act([s.obs for s in sl], [s.menu for s in sl],
                              histories=[list(s.history) for s in sl], seed=turn_seed)
        out = []
        for s, d in zip(sl, decisions):
            invalid = d.index is None or bool(getattr(d, "invalid", False))
            idx = _masked_index_for(s) if invalid else int(d.index)
            s.turns.append(Turn(observation=s.obs, action=str(d.command or d.text),
                                reward=0.0, prompt_ids=d.prompt_ids, response_ids=d.response_ids,
                                response_logprobs=d.response_logprobs, invalid=invalid,
                                expert_index=None if s.expert is None else int(s.expert),
                                info={"text": d.text}))
            out.append(idx)
        return out

    def _masked_index_for(s: _Slot) -> int:
        n = len(s.menu) if s.menu is not None else 0
        space_n = int(getattr(vec.single_action_space, "n", n + 1))
        return n if n < space_n else space_n - 1

    return _episodes(vec, reset_seeds, group_size, max_steps, act, "g", seed)


# ---------------------------------------------------------------------------------------
# the one summary of an evaluation's episodes
# ---------------------------------------------------------------------------------------


def summarize_episodes(seeds: Sequence[int], eps: Sequence[dict[str, Any]],
                       fingerprint: str | None = None) -> dict[str, Any]:
    """An evaluation's metrics from its episodes (``won``, ``steps``, ``return``,
    ``invalid`` each), in seed order; ``seeds`` are cut to the episodes given."""
    from deciplane.stats import wilson_interval

    seeds = list(seeds)[:len(eps)]
    wins = [int(e["won"]) for e in eps]
    steps = [int(e["steps"]) for e in eps]
    n = max(1, len(eps))
    env_steps, won = sum(steps), sum(wins)
    lo, hi = wilson_interval(won, len(eps))
    out: dict[str, Any] = {
        "success_rate": won / n, "success_ci95": [lo, hi], "won": won, "episodes": len(eps),
        "mean_return": sum(float(e["return"]) for e in eps) / n, "mean_steps": env_steps / n,
        "invalid_rate": sum(int(e["invalid"]) for e in eps) / max(1, env_steps),
        "env_steps": env_steps, "episode_seeds": seeds, "episode_wins": wins,
        "episode_steps": steps, "episode_returns": [float(e["return"]) for e in eps],
        "episode_invalid": [int(e["invalid"]) for e in eps]}
    if fingerprint is not None:
        out["split_fingerprint"] = fingerprint
    return out


def episodes_of(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The per-episode records of an evaluation result (inverse of
    :func:`summarize_episodes`)."""
    return [{"won": w, "steps": s, "return": r, "invalid": i} for w, s, r, i in
            zip(result["episode_wins"], result["episode_steps"], result["episode_returns"],
                result["episode_invalid"])]


__all__ = ["RolloutStats", "collect_expert_episodes", "collect_menu_episodes",
           "collect_text_episodes", "episodes_of", "make_vector_env", "summarize_episodes"]
