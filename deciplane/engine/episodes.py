"""The one episode loop (:func:`play_episodes`): training rollouts, the trainers'
held-out evaluation and :func:`~deciplane.evaluation.evaluate.evaluate_agent` all play
their episodes with it, over a ``gymnasium.vector`` env (:class:`VectorSlots`) or a list
of single envs (:class:`EnvListSlots`, which restart a finished env with the next
episode and take any action type and per-episode reset options).

Training episodes are *grouped*: every iteration picks ``games_per_iteration`` initial states (a
reset seed each, derived from ``(seed, iteration)``) and plays ``group_size`` episodes
from each, all in one ``SyncVectorEnv`` so that the agent decides for every live episode
in one batched forward pass. Episodes of the same initial state share a ``group_id`` —
the group of the group baseline (GRPO/RLOO...).

Three trajectory kinds (each an ``act`` callback of the one loop):

* :func:`collect_menu_episodes` — decision-plane (RLiD) agents; each turn stores the
  :class:`~deciplane.types.Decision` (old log-probs on the exact menu) and the env expert's
  menu index when the env offers one (``info["expert_action"]``, for distillation/BC);
* :func:`collect_expert_episodes` — the env expert plays, the agent's Decision of every
  visited state is recorded (behaviour cloning);
* :func:`collect_text_episodes` — free-text agents; each turn stores prompt/response token
  ids and the old per-token log-probs, so token losses keep the turn id of every token
  (TLM-DRE). An unmatched command is an *invalid turn*: the env gets a masked menu index
  (no state change, reward 0), the turn is counted and can be penalised.

All randomness (reset seeds, sampling) is a function of the seeds passed in, so a rollout
is reproducible from ``(seed, iteration)`` and the current weights alone.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

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


def _row_info(infos: dict[str, Any], i: int) -> dict[str, Any]:
    """Sub-env ``i``'s own info dict out of a vector env's stacked one (keys it did not
    report are left out; nested dicts are split the same way)."""
    out: dict[str, Any] = {}
    for key, value in infos.items():
        present = infos.get("_" + key)
        if key.startswith("_") or (present is not None and not bool(present[i])):
            continue
        if isinstance(value, dict):
            out[key] = _row_info(value, i)
        else:
            v = value[i]
            out[key] = v.item() if isinstance(v, np.generic) else v
    return out


def _menu_of(info: dict[str, Any]) -> Menu:
    m = info.get("menu")
    if m is None:
        raise KeyError("the environment returned no info['menu']; menu and text agents "
                       "need the menu contract of deciplane/TextWorld-v0")
    return m if isinstance(m, Menu) else Menu(tuple(m))


# ---------------------------------------------------------------------------------------
# the one episode loop
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EpisodeStart:
    """How one episode begins: ``env.reset(seed=seed, options=options)``."""

    seed: int
    options: dict[str, Any] | None = None


class Episode:
    """One episode as it is played: what the env said last, its rewards so far, and the
    turns the agent's ``act`` callback records (the trainers' :class:`Turn` records)."""

    def __init__(self, index: int, start: EpisodeStart, obs: Any, info: dict[str, Any]):
        self.index, self.start = index, start
        self.first_info = info
        self.obs, self.info = obs, info
        self.rewards: list[float] = []
        self.invalid_steps: list[bool] = []   # the env's info["invalid_action"] per step
        self.turns: list[Turn] = []
        self.done = self.won = self.truncated = False

    @property
    def steps(self) -> int:
        return len(self.rewards)

    @property
    def ret(self) -> float:
        return float(sum(self.rewards))

    def record(self, obs: Any, reward: float, terminated: bool, truncated: bool,
               info: dict[str, Any], max_steps: int) -> None:
        """One env step's result; the episode ends on ``terminated``/``truncated`` or at
        ``max_steps`` steps. Success is ``info["won"]`` where the env reports it, else a
        positive return."""
        self.rewards.append(float(reward))
        self.invalid_steps.append(bool(info.get("invalid_action", False)))
        self.obs, self.info = obs, info
        if terminated or truncated or self.steps >= max_steps:
            self.done = True
            self.won = bool(info["won"]) if "won" in info else self.ret > 0
            self.truncated = not terminated


class EnvSlots(Protocol):
    """Environments played in lockstep, addressed by row: what :func:`play_episodes`
    needs (:class:`VectorSlots` over a gymnasium vector env, :class:`EnvListSlots` over
    single envs)."""

    num_envs: int

    def reset(self, rows: list[int], starts: list[EpisodeStart]
              ) -> list[tuple[Any, dict[str, Any]]]: ...

    def step(self, rows: list[int], actions: Sequence[Any]
             ) -> list[tuple[Any, float, bool, bool, dict[str, Any]]]: ...


class VectorSlots:
    """A gymnasium vector env (next-step autoreset: a finished sub-env is stepped with
    action 0, which resets it, and its result ignored). All sub-envs start together, so
    it plays exactly ``num_envs`` episodes; each reset takes its seed, not options."""

    def __init__(self, vec: gym.vector.VectorEnv) -> None:
        self.vec, self.num_envs = vec, vec.num_envs

    def reset(self, rows: list[int], starts: list[EpisodeStart]
              ) -> list[tuple[Any, dict[str, Any]]]:
        if rows != list(range(self.num_envs)) or any(s.options for s in starts):
            raise ValueError("a vector env starts all its sub-envs together, from seeds "
                             "alone; play exactly num_envs episodes without reset options")
        obs, infos = self.vec.reset(seed=[s.seed for s in starts])
        return [(obs[i], _row_info(infos, i)) for i in rows]

    def step(self, rows: list[int], actions: Sequence[Any]
             ) -> list[tuple[Any, float, bool, bool, dict[str, Any]]]:
        full = np.zeros(self.num_envs, dtype=np.int64)
        full[rows] = actions
        obs, rewards, terms, truncs, infos = self.vec.step(full)
        return [(obs[i], float(rewards[i]), bool(terms[i]), bool(truncs[i]),
                 _row_info(infos, i)) for i in rows]


class EnvListSlots:
    """Single gymnasium envs, each reset and stepped on its own (any action type, reset
    options per episode, a finished env restarts with the next episode)."""

    def __init__(self, envs: Sequence[gym.Env]) -> None:
        self.envs, self.num_envs = list(envs), len(envs)

    def reset(self, rows: list[int], starts: list[EpisodeStart]
              ) -> list[tuple[Any, dict[str, Any]]]:
        return [self.envs[k].reset(seed=s.seed, options=s.options)
                for k, s in zip(rows, starts)]

    def step(self, rows: list[int], actions: Sequence[Any]
             ) -> list[tuple[Any, float, bool, bool, dict[str, Any]]]:
        return [self.envs[k].step(a) for k, a in zip(rows, actions)]


@dataclass
class Played:
    """What :func:`play_episodes` returns: the episodes in start order, and the seconds
    spent deciding and stepping (resets and game loading excluded)."""

    episodes: list[Episode]
    play_s: float

    @property
    def decisions(self) -> int:
        return sum(ep.steps for ep in self.episodes)


def play_episodes(envs: EnvSlots, starts: Sequence[EpisodeStart],
                  act: Callable[[list[Episode], int], Sequence[Any]], max_steps: int,
                  on_end: Callable[[Episode], None] | None = None) -> Played:
    """Play one episode per start in ``envs``, in lockstep: a free env begins the next
    episode, ``act(live_episodes, t)`` decides for every live episode in one call (``t``
    counts lockstep steps from 0), every live env steps, a finished episode frees its env
    (``on_end(episode)`` is called then)."""
    pending = list(enumerate(starts))[::-1]
    slots: list[Episode | None] = [None] * envs.num_envs
    finished: list[Episode] = []
    play_s, t = 0.0, 0
    while len(finished) < len(starts):
        free = [k for k, ep in enumerate(slots) if ep is None][:len(pending)]
        if free:
            begun = [pending.pop() for _ in free]
            for k, (i, start), (obs, info) in zip(free, begun,
                                                  envs.reset(free, [s for _, s in begun])):
                slots[k] = Episode(i, start, obs, info)
        live = [k for k, ep in enumerate(slots) if ep is not None]
        eps = [slots[k] for k in live]
        t0 = time.perf_counter()     # resets (above) are not timed
        actions = list(act(eps, t))  # type: ignore[arg-type]
        if len(actions) != len(live):
            raise ValueError(f"act returned {len(actions)} actions for {len(live)} episodes")
        for k, ep, result in zip(live, eps, envs.step(live, actions)):
            assert ep is not None
            ep.record(*result, max_steps=max_steps)
            if ep.done:
                finished.append(ep)
                slots[k] = None
                if on_end is not None:
                    on_end(ep)
        play_s += time.perf_counter() - t0
        t += 1
    return Played(sorted(finished, key=lambda ep: ep.index), play_s)


def _episodes(vec: gym.vector.VectorEnv, reset_seeds: Sequence[int], group_size: int,
              max_steps: int, act: Callable[[list[Episode], int], list[int]],
              group_prefix: str, step_seed: int) -> tuple[list[Trajectory], RolloutStats]:
    """Grouped trajectories: ``group_size`` episodes from each reset seed, all at once in
    ``vec`` (which must have that many sub-envs; a ``SyncVectorEnv`` may have more: an env
    of a suite drawn for fewer groups than its vector holds plays on the first ones).
    ``act(episodes, turn_seed)`` appends each live episode's new :class:`Turn` and returns
    the env actions."""
    n = len(reset_seeds) * group_size
    if vec.num_envs == n:
        slots: EnvSlots = VectorSlots(vec)
    elif vec.num_envs > n and hasattr(vec, "envs"):
        slots = EnvListSlots(vec.envs[:n])
    else:
        raise ValueError(f"vector env has {vec.num_envs} sub-envs but {n} episodes were "
                         "requested; build it with games_per_iteration * group_size envs")
    starts = [EpisodeStart(int(s)) for s in reset_seeds for _ in range(group_size)]
    played = play_episodes(
        slots, starts,
        lambda eps, t: act(eps, (step_seed + 1_000_003 * (t + 1)) % (2**63 - 1)), max_steps)
    trajs, stats = [], RolloutStats()
    for ep in played.episodes:
        for turn, reward, invalid in zip(ep.turns, ep.rewards, ep.invalid_steps):
            turn.reward = reward
            turn.info["invalid_action"] = invalid
        meta: dict[str, Any] = {"reset_seed": ep.start.seed}
        if ep.first_info.get("game") is not None:
            meta["game"] = str(ep.first_info["game"])
        tr = Trajectory(turns=ep.turns, group_id=f"{group_prefix}{ep.start.seed}", won=ep.won,
                        truncated=ep.truncated, meta=meta)
        trajs.append(tr)
        stats.env_steps += ep.steps
        stats.invalid += sum(int(turn.invalid) for turn in ep.turns)
        stats.episodes += 1
        stats.won += int(tr.won)
        stats.return_sum += tr.total_reward
        stats.length_sum += len(tr)
    return trajs, stats


def _history(ep: Episode) -> list[tuple[str, str]]:
    """(observation, action) of the episode's past turns."""
    return [(turn.observation, turn.action) for turn in ep.turns]


def _expert_of(ep: Episode) -> int | None:
    e = ep.info.get("expert_action")
    return None if e is None else int(e)


def _state_key_of(ep: Episode) -> dict[str, str]:
    """``{"state_key": ...}`` of the state the agent decides in, where the env gives one
    (GiGPO's anchor state, :meth:`deciplane.envs.menu.base.MenuTextEnv.state_key`)."""
    key = ep.info.get("state_key")
    return {} if key is None else {"state_key": str(key)}


def _decide(agent: Any, eps: list[Episode], turn_seed: int) -> list[Any]:
    """The agent's decisions for the live episodes, in one batched call."""
    return agent.act([str(ep.obs) for ep in eps], [_menu_of(ep.info) for ep in eps],
                     histories=[_history(ep) for ep in eps], seed=turn_seed)


def collect_menu_episodes(agent: Any, vec: gym.vector.VectorEnv, reset_seeds: Sequence[int],
                          group_size: int, max_steps: int, seed: int,
                          greedy: bool = False) -> tuple[list[Trajectory], RolloutStats]:
    """Grouped episodes with a decision-plane agent (``MenuAgent``).

    Each turn stores the Decision (old log-probs over the exact menu) and, when the env
    offers it, the expert's menu index (``Turn.expert_index``).
    """

    def act(eps: list[Episode], turn_seed: int) -> list[int]:
        decisions = _decide(agent, eps, turn_seed)
        for ep, d in zip(eps, decisions):
            ep.turns.append(Turn(observation=str(ep.obs), action=d.action, reward=0.0,
                                 decision=d, expert_index=_expert_of(ep),
                                 info=_state_key_of(ep)))
        return [int(d.index) for d in decisions]

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

    def act(eps: list[Episode], turn_seed: int) -> list[int]:
        decisions = _decide(agent, eps, turn_seed)
        out = []
        for ep, d in zip(eps, decisions):
            e, menu = _expert_of(ep), _menu_of(ep.info)
            if e is None and noise <= 0:
                raise KeyError("behaviour cloning needs info['expert_action']; build the env "
                               "with expert=True (TextWorld-v0) or disable the warm start")
            played = e if e is not None and rng.random() >= noise else rng.randrange(len(menu))
            ep.turns.append(Turn(observation=str(ep.obs), action=menu[played], reward=0.0,
                                 decision=d, expert_index=e))
            out.append(played)
        return out

    return _episodes(vec, reset_seeds, 1, max_steps, act, "x", seed)


def collect_text_episodes(agent: Any, vec: gym.vector.VectorEnv, reset_seeds: Sequence[int],
                          group_size: int, max_steps: int, seed: int
                          ) -> tuple[list[Trajectory], RolloutStats]:
    """Grouped episodes with a free-text agent (``TextAgent``): token ids + old token
    log-probs per turn; an unmatched command is an invalid turn (masked index, no change)."""

    def act(eps: list[Episode], turn_seed: int) -> list[int]:
        decisions = _decide(agent, eps, turn_seed)
        out = []
        for ep, d in zip(eps, decisions):
            invalid = d.index is None or bool(getattr(d, "invalid", False))
            idx = _masked_index(len(_menu_of(ep.info))) if invalid else int(d.index)
            ep.turns.append(Turn(observation=str(ep.obs), action=str(d.command or d.text),
                                 reward=0.0, prompt_ids=d.prompt_ids,
                                 response_ids=d.response_ids,
                                 response_logprobs=d.response_logprobs, invalid=invalid,
                                 expert_index=_expert_of(ep),
                                 info={"text": d.text, **_state_key_of(ep)}))
            out.append(idx)
        return out

    def _masked_index(n: int) -> int:
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


__all__ = ["EnvListSlots", "EnvSlots", "Episode", "EpisodeStart", "Played", "RolloutStats",
           "VectorSlots", "collect_expert_episodes", "collect_menu_episodes",
           "collect_text_episodes", "episodes_of", "make_vector_env", "play_episodes",
           "summarize_episodes"]
