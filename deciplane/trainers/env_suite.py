"""Environment suites for training and evaluation: which game each episode plays.

An env whose split is a list of tasks known before any env is built says so through its
class's ``task_list`` (:mod:`deciplane.envs.splits`; ``deciplane/TextWorld-v0``: the game
files of a preset or the user's). Such a split plays in *list mode*: each sub-env of the
rollout's ``gymnasium.vector.SyncVectorEnv`` is a :class:`~deciplane.envs.wrappers.GameSlotEnv`
whose reset seed picks the task (``task = seed mod size``), so a group — the episodes that
share an initial state — is simply the set of sub-envs reset with the same seed. Evaluation
plays every task of the split once (or ``episodes`` episodes cycling through the tasks).

Any other registered environment (a plug-in with the menu contract) runs in *seed mode*:
the reset seed is the initial state, and evaluation uses seeds ``0..episodes-1`` of an env
built for the split (``split=<split>`` when it accepts that argument, or what its class's
``split_kwargs`` says). An env that exposes ``num_tasks`` (``deciplane/TextWorldExpress-v0``:
the 1000 seeds of an official fold) plays task ``seed % num_tasks`` (``options={"task":
...}``), so evaluation episode ``i`` is the ``i``-th game of the fold, as in ``deciplane
evaluate``.

Menus carry no position shortcut: unless the config's ``env.kwargs`` say otherwise, every
env that takes them is built with ``menu_order="shuffled"`` and
``task_in_observation=True`` (:data:`MENU_DEFAULTS`) for training rollouts, behaviour
cloning and evaluation alike. The menu seed is the reset seed, so the episodes of a group
(reset with the same seed) see the same menus along their shared prefix, and evaluation
episode ``i`` (reset seed ``i``) gets one fixed shuffle, the same for every agent compared
(``info["menu_seed"]``).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import gymnasium as gym
import numpy as np

from deciplane._moved import renamed_names
from deciplane.engine.episodes import make_vector_env
from deciplane.envs.splits import TaskList, env_params, split_kwargs, task_list
from deciplane.envs import wrappers
from deciplane.trainers.config import EnvConfig

MENU_DEFAULTS: dict[str, Any] = {"menu_order": "shuffled", "task_in_observation": True}
"""Env options the trainer sets unless ``env.kwargs`` gives them (when the env takes them)."""


def with_menu_defaults(kwargs: dict[str, Any], accepted: set[str]) -> dict[str, Any]:
    """``kwargs`` plus :data:`MENU_DEFAULTS` for the options the env takes and ``kwargs``
    does not set."""
    out = dict(kwargs)
    for k, v in MENU_DEFAULTS.items():
        if k in accepted:
            out.setdefault(k, v)
    return out


class EnvSuite:
    """Builds the rollout vector env of an iteration and runs evaluations."""

    def __init__(self, cfg: EnvConfig, expert: bool = False, workers: Any = None,
                 name: str | None = None) -> None:
        self.cfg = cfg
        self.name = name
        """Its name in a :class:`MultiEnvSuite` (the helpers of :attr:`pool` find it by
        it); None for a run's one env."""
        self.expert = expert
        self.workers = workers  # EnvWorkersConfig: where train_batch's sub-envs run
        self.kwargs = dict(cfg.kwargs)
        self._tasks: dict[str, TaskList | None] = {}
        self._vec: dict[int, gym.vector.VectorEnv] = {}
        self._fps: dict[str, str] = {}
        self.progress: Callable[[str, int, int, dict[str, Any]], None] | None = None
        """Set by the trainer: called after every evaluation batch (a line per batch in a
        log file)."""
        self.episode_limit: int | None = None
        """Set by the trainer's time plan: at most this many evaluation episodes (the first
        ones of the split's list, so every evaluation plays the same episodes)."""
        self.setup_s = 0.0
        """Seconds spent generating games and building envs (JVMs) so far."""
        self.pool: Any = None
        """An :class:`~deciplane.trainers.eval_pool.EvalPool` (``eval.workers`` > 1) that
        :meth:`evaluate` shares its batches with, or None."""

    # ---- tasks -----------------------------------------------------------------------------
    def tasks(self, split: str) -> TaskList | None:
        """The task list of ``split`` (list mode), or None (seed mode); asked once per split."""
        if split not in self._tasks:
            t0 = time.perf_counter()
            try:
                found = task_list(self.cfg.id, split, self.kwargs)
            finally:
                self.setup_s += time.perf_counter() - t0
            self._tasks[split] = found
            if found is not None:
                self._fps[split] = found.fingerprint
        return self._tasks[split]

    def fingerprints(self) -> dict[str, str]:
        return dict(self._fps)

    def _make_env(self, split: str, expert: bool | None = None) -> Callable[..., gym.Env]:
        """A factory of one sub-env of ``split`` (plain values only in its closure: Ray
        ships it to the workers)."""
        expert = self.expert if expert is None else expert
        env_id, steps = self.cfg.id, self.cfg.max_episode_steps
        params = env_params(env_id)
        kw = with_menu_defaults(self.kwargs, params)
        if expert and "expert" in params:
            kw["expert"] = True
        kw.update(split_kwargs(env_id, split, self.kwargs))
        tasks = self.tasks(split)
        if tasks is not None:   # list mode: the reset seed picks the task
            size = tasks.size
            return lambda: wrappers.GameSlotEnv(
                gym.make(env_id, max_episode_steps=steps, **kw), size)
        return lambda: wrappers.DropNoneInfo(wrappers.task_slots(
            gym.make(env_id, max_episode_steps=steps, **kw)))

    def _vector(self, split: str, n: int, remote: bool = False,
                expert: bool | None = None) -> gym.vector.VectorEnv:
        """``n`` sub-envs of ``split`` (cached); ``expert`` defaults to the suite's (off for
        evaluation: a planner expert can cost seconds per step, ALFWorld's pick-two games)."""
        w = self.workers
        remote = remote and w is not None and w.backend == "ray"
        expert = self.expert if expert is None else bool(expert)
        key = hash((split, n, remote, expert))
        if key not in self._vec:
            t0 = time.perf_counter()
            try:
                self._build_vector(key, split, n, remote, expert)
            finally:
                self.setup_s += time.perf_counter() - t0
        return self._vec[key]

    def _build_vector(self, key: int, split: str, n: int, remote: bool, expert: bool) -> None:
        w = self.workers
        if key not in self._vec:
            fns = [self._make_env(split, expert) for _ in range(n)]
            if remote:
                from deciplane.vector.ray_env import make_ray_vector_env
                self._vec[key] = make_ray_vector_env(
                    fns, w.num_workers, on_failure=w.on_failure, max_retries=w.max_retries,
                    step_timeout_s=w.step_timeout_s)
            else:
                self._vec[key] = make_vector_env(fns)
                sub = getattr(self._vec[key], "envs", [None])[0]
                fp = getattr(getattr(sub, "unwrapped", None), "split_fingerprint", None)
                if fp is not None:      # seed-mode envs that fingerprint their split (TWX)
                    self._fps.setdefault(split, str(fp))

    # ---- training --------------------------------------------------------------------------
    def play_groups(self, collect: Callable, agent: Any, seed: int
                    ) -> tuple[list[Any], Any]:
        """One iteration's groups played by ``agent`` with ``collect``
        (``collect_menu_episodes``, ``collect_text_episodes``): ``(trajectories, stats)``."""
        vec, reset_seeds = self.train_batch(seed)
        return collect(agent, vec, reset_seeds, self.cfg.group_size,
                       self.cfg.max_episode_steps, seed)

    def train_batch(self, seed: int, episodes: str | None = None, groups: int | None = None
                    ) -> tuple[gym.vector.VectorEnv, list[int]]:
        """The vector env and the per-group reset seeds of one iteration.

        ``games_per_iteration`` groups (or ``groups``) of ``group_size`` sub-envs each, or
        with ``episodes="rollout"`` one single-episode group per sub-env of the same vector
        env (expert/BC collection). Games are drawn without replacement while the split has
        enough, from an RNG seeded by ``seed``.
        """
        c = self.cfg
        single = episodes is not None
        games = c.games_per_iteration if groups is None else groups
        groups = games * c.group_size if single else games
        per = 1 if single else c.group_size
        rng = np.random.default_rng(seed % (2**63))
        tasks = self.tasks(c.train_split)
        if tasks is not None:
            n = tasks.size
            order = np.concatenate([rng.permutation(n) for _ in range(-(-groups // n))])[:groups]
            # seed = task + n * k: the task is fixed, k varies the env's own RNG
            reset = [int(g) + n * int(rng.integers(1, 1 << 20)) for g in order]
        else:
            reset = [int(s) for s in rng.choice(2**31 - 1, size=groups, replace=False)]
        return self._vector(c.train_split, groups * per, remote=True), reset

    # ---- evaluation ------------------------------------------------------------------------
    def eval_seeds(self, split: str, episodes: int | None) -> list[int]:
        """Reset seeds ``0..episodes-1``: by default every task of a list once, else 10."""
        tasks = self.tasks(split)
        if tasks is not None:
            return list(range(tasks.size if episodes is None else episodes))
        return list(range(episodes or 10))

    def evaluate(self, agent: Any, split: str, episodes: int | None, collect: Callable,
                 model: Any = None, batch: int = 8, remote: str | None = None
                 ) -> dict[str, Any]:
        """Play the split's evaluation episodes with ``agent`` (greedy): success rate with
        its 95% Wilson interval, mean steps and return, invalid rate, the per-episode wins,
        lengths, returns and invalid steps in seed order (``episode_wins``, for paired
        comparisons: same ``episode_seeds``, same games and menus) and the split
        fingerprint (:func:`~deciplane.engine.episodes.summarize_episodes`).
        ``self.progress(phase, done, total, metrics)``, when set, is called after every
        batch.

        With a :attr:`pool` (``eval.workers`` > 1) and ``remote`` (the name of the same
        agent in the helpers, ``Algorithm.eval_spec``), the batches are shared with the
        helper processes and this process plays its own on one thread, in smaller batches
        (:func:`~deciplane.trainers.eval_pool.pooled_batch`) so that no process waits
        long for the last one."""
        import torch

        from deciplane.engine.episodes import summarize_episodes
        from deciplane.trainers.eval_pool import batch_starts, pooled_batch, share_batches

        seeds = self.eval_seeds(split, episodes)
        if self.episode_limit is not None:
            seeds = seeds[:self.episode_limit]
        pool = self.pool if remote is not None else None
        done: list[int] = []

        def limit() -> int:   # the time plan may set it after the first batch
            n = len(seeds)
            return n if self.episode_limit is None else min(n, max(self.episode_limit, 1))

        def local(start: int, stop: int) -> list[dict[str, Any]]:
            return self.play_batch(agent, split, seeds[start:stop], collect)

        def on_done(start: int, out: list[dict[str, Any]]) -> None:
            done.extend(e["won"] for e in out)
            if self.progress is not None:
                self.progress(f"eval {split}", len(done), limit(),
                              {"success": sum(done) / len(done)})

        was_training = bool(model.training) if model is not None else False
        threads = torch.get_num_threads()
        if model is not None:
            model.eval()
        try:
            runners: list[Callable[[int, int], Any]] = [local]
            if pool is not None:
                pool.sync(model)
                runners += pool.runners(remote, split, seeds, env=self.name)
                torch.set_num_threads(1)   # one thread per process (module doc of eval_pool)
                batch = pooled_batch(batch, pool.workers)
            parts = share_batches(batch_starts(len(seeds), batch), batch, limit, runners,
                                  on_done)
        finally:
            torch.set_num_threads(threads)
            if model is not None and was_training:
                model.train()
        # episode order; a batch that ran past a limit set meanwhile is cut to it, so that
        # every evaluation of the run plays the same episodes
        eps = [e for start in sorted(parts) for e in parts[start]][:limit()]
        # (a helper may have played every batch: then this process has built no env yet)
        return summarize_episodes(seeds, eps, self.split_fingerprint(split))

    def split_fingerprint(self, split: str) -> str | None:
        """The fingerprint of ``split``'s episodes (building one env if none was built)."""
        if split not in self._fps:
            vec = self._vector(split, 1, expert=False)
            if split not in self._fps:   # envs with their own suites (ALFWorld, ...)
                try:
                    self._fps[split] = str(vec.get_attr("split_fingerprint")[0])
                except Exception:  # noqa: BLE001 - an env without a fingerprint
                    pass
        return self._fps.get(split)

    def play_batch(self, agent: Any, split: str, seeds: Sequence[int], collect: Callable
                   ) -> list[dict[str, Any]]:
        """One batch of evaluation episodes, one per reset seed, in seed order: ``won``,
        ``steps``, ``return``, ``invalid`` (steps) each (plain data: it may cross a
        process boundary)."""
        import torch

        vec = self._vector(split, len(seeds), expert=False)
        if split not in self._fps:  # envs with their own suites (ALFWorld, ...)
            try:
                self._fps[split] = str(vec.get_attr("split_fingerprint")[0])
            except Exception:  # noqa: BLE001 - an env without a fingerprint
                pass
        with torch.no_grad():
            trajs, _ = collect(agent, vec, list(seeds), 1, self.cfg.max_episode_steps, seed=0)
        return [{"won": int(t.won), "steps": len(t), "return": t.total_reward,
                 "invalid": sum(int(turn.invalid) for turn in t.turns)} for t in trajs]

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None
        for v in self._vec.values():
            v.close()
        self._vec.clear()



def has_expert(entry: Any) -> bool:
    """Whether an env can be built with an expert (an ``expert`` constructor option)."""
    return "expert" in env_params(entry.id)


def draw_group_envs(weights: Sequence[float], groups: int, seed: int) -> list[int]:
    """The env (its index) of each of an iteration's ``groups`` groups, drawn independently
    with probability ``weight / sum(weights)`` from an RNG seeded by ``seed``."""
    w = np.asarray(weights, dtype=np.float64)
    if len(w) == 0 or not np.all(w > 0):
        raise ValueError(f"every env of a suite needs a weight > 0, got {list(weights)}")
    rng = np.random.default_rng([seed % (2**63), 0x5E1EC7])
    return [int(i) for i in rng.choice(len(w), size=groups, p=w / w.sum())]


def apportion(total: int, weights: Sequence[float]) -> list[int]:
    """``total`` split in proportion to ``weights`` by largest remainders (ties to the
    earlier entry): ``apportion(10, [2, 1, 1]) == [5, 3, 2]``."""
    w = np.asarray(weights, dtype=np.float64)
    exact = total * w / w.sum()
    out = np.floor(exact).astype(int)
    order = sorted(range(len(w)), key=lambda i: (-(exact[i] - out[i]), i))
    for i in order[:total - int(out.sum())]:
        out[i] += 1
    return [int(x) for x in out]


def member_seed(seed: int, index: int) -> int:
    """The seed of a suite member's own draws in an iteration seeded by ``seed``."""
    return int(np.random.default_rng([seed % (2**63), index]).integers(2**62))


class MultiEnvSuite:
    """Several environments in one run (``envs:``): one :class:`EnvSuite` per env (its
    :attr:`members`, by name), the same interface as one.

    Training: each of an iteration's ``games_per_iteration`` groups plays in one env, drawn
    by weight (:func:`draw_group_envs`, seeded by the iteration: a resumed run draws the same
    envs with no state of its own to checkpoint); an env's groups play together, its group
    ids are prefixed with its name (``twc/g123``) and its trajectories carry
    ``meta["env"]``. Evaluation: each env plays its own split (``splits``) and episodes
    (``eval_episodes``); the result pools every episode (``success_rate`` over all of them,
    ``episode_seeds`` as ``"NAME:SEED"``) and adds ``macro_success_rate`` (the mean of the
    envs' rates) and ``per_env`` (each env's own result). An episode limit of the time plan
    is shared between the envs in proportion to their episodes.
    """

    def __init__(self, entries: Sequence[Any], expert: bool = False, workers: Any = None
                 ) -> None:
        self.entries = list(entries)
        self.members: dict[str, EnvSuite] = {
            e.name: EnvSuite(e, expert=expert, workers=workers, name=e.name)
            for e in self.entries}
        first = self.entries[0]
        self.cfg = first       # the iteration's shape (equal in every entry)
        self._limit: int | None = None
        self._wanted: dict[str, int] | None = None   # each env's episodes, while evaluating
        self.progress: Callable[[str, int, int, dict[str, Any]], None] | None = None
        """Set by the trainer: called after every evaluation batch, counting over the suite."""
        self._pool: Any = None

    def member(self, name: str) -> EnvSuite:
        return self.members[name]

    # ---- settings the trainer makes -------------------------------------------------------
    @property
    def setup_s(self) -> float:
        return sum(m.setup_s for m in self.members.values())

    @property
    def pool(self) -> Any:
        return self._pool

    @pool.setter
    def pool(self, pool: Any) -> None:
        self._pool = pool
        for m in self.members.values():
            m.pool = pool

    @property
    def episode_limit(self) -> int | None:
        return self._limit

    @episode_limit.setter
    def episode_limit(self, n: int | None) -> None:
        """The plan may set it in the middle of an evaluation (after its first episodes):
        the envs still to play, and the one playing, get their share at once."""
        self._limit = n
        if self._wanted is not None:
            for name, limit in self._member_limits(self._wanted).items():
                self.members[name].episode_limit = limit

    # ---- tasks and fingerprints -----------------------------------------------------------
    def fingerprints(self) -> dict[str, str]:
        return {f"{name}/{split}": fp for name, m in self.members.items()
                for split, fp in m.fingerprints().items()}

    @staticmethod
    def _env_episodes(entry: Any, episodes: int | None) -> int | None:
        """An env's evaluation episodes: its own ``eval_episodes``, else the run's."""
        return episodes if entry.eval_episodes is None else entry.eval_episodes

    def _member_seeds(self, split: str, episodes: int | None) -> dict[str, list[int]]:
        """Each env's evaluation reset seeds of the run's ``split``."""
        return {e.name: self.members[e.name].eval_seeds(e.split(split),
                                                        self._env_episodes(e, episodes))
                for e in self.entries}

    def _episodes(self, split: str, episodes: int | None) -> dict[str, int]:
        """Each env's evaluation episodes of the run's ``split``."""
        return {name: len(s) for name, s in self._member_seeds(split, episodes).items()}

    def eval_seeds(self, split: str, episodes: int | None) -> list[str]:
        """Every evaluation episode of ``split``, as ``"NAME:SEED"``, env after env."""
        return [f"{name}:{s}" for name, seeds in self._member_seeds(split, episodes).items()
                for s in seeds]

    def split_fingerprint(self, split: str) -> str | None:
        parts = [self.members[e.name].split_fingerprint(e.split(split)) for e in self.entries]
        if any(p is None for p in parts):
            return None
        import hashlib

        blob = "|".join(f"{e.name}={p}" for e, p in zip(self.entries, parts))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    # ---- training -------------------------------------------------------------------------
    def play_groups(self, collect: Callable, agent: Any, seed: int
                    ) -> tuple[list[Any], Any]:
        """One iteration: the groups drawn by weight, each env's played together."""
        picks = draw_group_envs([e.weight for e in self.entries],
                                self.cfg.games_per_iteration, seed)
        trajs: list[Any] = []
        stats = None
        for i, e in enumerate(self.entries):
            groups = picks.count(i)
            if groups == 0:
                continue
            m = self.members[e.name]
            s = member_seed(seed, i)
            vec, reset_seeds = m.train_batch(s, groups=groups)
            part, st = collect(agent, vec, reset_seeds, e.group_size, e.max_episode_steps, s)
            for t in part:
                t.group_id = f"{e.name}/{t.group_id}"
                t.meta["env"] = e.name
            trajs += part
            stats = st if stats is None else stats.merge(st)
        return trajs, stats

    def expert_shares(self, episodes: int) -> dict[str, int]:
        """The warm start's ``episodes`` shared by weight among the envs that have an
        expert (an ``expert`` constructor option); the others get none."""
        with_expert = [e for e in self.entries if has_expert(e)]
        counts = apportion(episodes, [e.weight for e in with_expert]) if with_expert else []
        shares = {e.name: 0 for e in self.entries}
        shares.update({e.name: n for e, n in zip(with_expert, counts)})
        return shares

    # ---- evaluation -----------------------------------------------------------------------
    def evaluate(self, agent: Any, split: str, episodes: int | None, collect: Callable,
                 model: Any = None, batch: int = 8, remote: str | None = None
                 ) -> dict[str, Any]:
        """Every env plays its episodes of ``split`` (:meth:`EnvSuite.evaluate`); the
        pooled result with ``macro_success_rate`` and ``per_env`` (class doc)."""
        from deciplane.engine.episodes import episodes_of, summarize_episodes

        self._wanted = wanted = self._episodes(split, episodes)
        per_env: dict[str, dict[str, Any]] = {}
        done_before = 0
        try:
            for name, limit in self._member_limits(wanted).items():
                self.members[name].episode_limit = limit
            for e in self.entries:
                m = self.members[e.name]

                def report(phase: str, done: int, _total: int, metrics: dict[str, Any],
                           offset: int = done_before) -> None:
                    if self.progress is not None:
                        total = sum(self._member_limits(wanted).values())
                        self.progress(phase, offset + done, total, metrics)

                m.progress = report
                per_env[e.name] = m.evaluate(
                    agent, e.split(split),
                    self._env_episodes(e, episodes),
                    collect, model=model, batch=batch, remote=remote)
                done_before += per_env[e.name]["episodes"]
        finally:
            self._wanted = None
            for m in self.members.values():
                m.progress, m.episode_limit = None, None
        seeds = [f"{name}:{s}" for name, r in per_env.items() for s in r["episode_seeds"]]
        eps = [ep for r in per_env.values() for ep in episodes_of(r)]
        out = summarize_episodes(seeds, eps, self.split_fingerprint(split))
        out["macro_success_rate"] = macro_average([r["success_rate"] for r in per_env.values()])
        out["per_env"] = per_env
        return out

    def _member_limits(self, wanted: dict[str, int]) -> dict[str, int]:
        """Each env's episodes under the plan's limit (a total over the suite), in
        proportion to what each asked for, at least one each."""
        total = sum(wanted.values())
        if self._limit is None or self._limit >= total:
            return dict(wanted)
        cut = apportion(max(self._limit, len(wanted)), list(wanted.values()))
        return {name: max(1, min(n, c)) for (name, n), c in zip(wanted.items(), cut)}

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self.pool = None
        for m in self.members.values():
            m.close()


def per_env_rollout_metrics(trajs: Sequence[Any]) -> dict[str, float]:
    """``rollout/ENV/episodes`` and ``rollout/ENV/success`` of a suite's iteration (from
    each trajectory's ``meta["env"]``); empty for one env."""
    by_env: dict[str, list[bool]] = {}
    for t in trajs:
        if "env" in t.meta:
            by_env.setdefault(t.meta["env"], []).append(bool(t.won))
    out: dict[str, float] = {}
    for env, won in by_env.items():
        out[f"rollout/{env}/episodes"] = float(len(won))
        out[f"rollout/{env}/success"] = sum(won) / len(won)
    return out


def warm_start_envs(suite: Any, trajs: Sequence[Any]) -> dict[str, Any]:
    """What a suite's warm start drew from each env: ``per_env_episodes`` and the envs
    with no expert (``no_expert``); empty for one env."""
    if not isinstance(suite, MultiEnvSuite):
        return {}
    counts = {name: 0 for name in suite.members}
    for t in trajs:
        counts[t.meta["env"]] += 1
    none = [e.name for e in suite.entries if not has_expert(e)]
    return {"per_env_episodes": counts, "no_expert": none}


def check_env_ids(entries: Sequence[Any]) -> None:
    """Every env id registered (``deciplane envs``), checked before any model loads."""
    import deciplane.envs  # noqa: F401 - registers the built-in ids
    from deciplane.errors import ConfigError

    for e in entries:
        try:
            gym.spec(e.id)
        except gym.error.Error as err:
            raise ConfigError(f"env id {e.id!r} is not registered ({err}); `deciplane envs` "
                              "lists the registered ones (a plug-in env registers on import "
                              "or through its package's entry point)") from None


def macro_average(rates: Sequence[float]) -> float:
    """The mean of the envs' success rates (each env counts once, whatever its episodes)."""
    return float(np.mean(rates)) if len(rates) else 0.0


def make_suite(config: Any, expert: bool = False, workers: Any = None
               ) -> EnvSuite | MultiEnvSuite:
    """The env suite of a training config: :class:`EnvSuite` for its one ``env:`` section,
    :class:`MultiEnvSuite` for ``envs:``."""
    if getattr(config, "envs", None):
        return MultiEnvSuite(config.envs, expert=expert, workers=workers)
    return EnvSuite(config.env, expert=expert, workers=workers)


__getattr__ = renamed_names(__name__)   # the wrappers, in deciplane.envs.wrappers since 0.3
