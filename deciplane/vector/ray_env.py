"""Environment workers as Ray actors behind the ``gymnasium.vector`` interface.

```python
import gymnasium as gym
from deciplane.vector.ray_env import RayVectorEnv, EnvSpec

vec = RayVectorEnv([EnvSpec("deciplane/TextWorld-v0")] * 8, num_workers=2)
obs, infos = vec.reset(seed=[0, 1, 2, 3, 4, 5, 6, 7])
obs, rewards, terminated, truncated, infos = vec.step(actions)
vec.close()
```

:class:`RayVectorEnv` is a :class:`gymnasium.vector.VectorEnv`: the same ``reset`` /
``step`` / ``call`` / ``get_attr`` as ``SyncVectorEnv``, the same autoreset modes, the
same batched observations and the same info dict-of-arrays with ``_key`` masks. With the
same env factories, seeds and actions it returns exactly what ``SyncVectorEnv`` returns
(tested), so rollout code uses it unchanged.

The sub-envs are split into ``num_workers`` contiguous blocks; each block lives in one
Ray actor (one process, on any node of the cluster) which builds its envs from the
factories: :class:`EnvSpec` (an id + kwargs, built with :func:`deciplane.envs.make` so
plug-in ids work) or any picklable zero-argument callable, as for ``SyncVectorEnv``.
Each ``step`` is one round trip per worker, all workers in parallel.

Worker failure. Every call to a worker has a deadline (``step_timeout_s``). A worker
that crashes (its process dies: ``RayActorError``) or hangs (misses the deadline) is
killed and replaced by a fresh actor that rebuilds the same envs; what happens to the
episodes it was playing is ``on_failure``:

* ``"retry"`` (default): each episode is replayed on the new worker — reset with the same
  seed and options, then the same actions — and the replay is checked: its last
  observation must equal the one returned before the failure. The interrupted call then
  runs again, so the caller sees nothing but a slower step. An episode whose replay
  differs (a non-deterministic env), is longer than ``max_replay_ops``, or whose worker
  failed ``max_retries`` times in the same call, is dropped instead;
* ``"drop"``: the episode ends at once: ``truncated=True``, reward ``0.0``, the
  observation returned before the failure, and ``info["env_worker_dropped"] = True``.
  The next step autoresets it as any finished episode.

:attr:`RayVectorEnv.failures` counts ``restarts``, ``crashes``, ``timeouts``,
``episodes_retried`` and ``episodes_dropped``. A reset that fails ``max_retries`` times
raises :class:`deciplane.errors.EnvWorkerError` — a worker failure is never a silent hang.
An exception raised *by the environment* (a bug, an invalid action) is not a worker
failure: it propagates to the caller with its original type, as in ``SyncVectorEnv``.
"""

from __future__ import annotations

import os
import pickle
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate
from gymnasium.vector.vector_env import AutoresetMode

from deciplane.ray_cluster import ensure_ray, require_ray  # noqa: F401 - re-exported
from deciplane.errors import ConfigError, EnvWorkerError

ON_FAILURE = ("retry", "drop")
DROPPED_KEY = "env_worker_dropped"


@dataclass(frozen=True)
class EnvSpec:
    """A picklable env factory: ``deciplane.envs.make(id, **kwargs)`` on the worker.

    ``wrapper`` (optional) is a picklable callable applied to the made env, e.g. a
    ``gym.Wrapper`` subclass or ``functools.partial(Wrapper, arg=...)``.
    """

    id: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    wrapper: Callable[[gym.Env], gym.Env] | None = None

    def __call__(self) -> gym.Env:
        from deciplane.envs import make

        env = make(self.id, **dict(self.kwargs))
        return self.wrapper(env) if self.wrapper is not None else env


# --------------------------------------------------------------------------------------------
# The actor: a block of envs in one process. Ops are (local index, kind, payload):
#   ("reset", (seed, options)) -> ("reset", obs, info)
#   ("step", action)           -> ("step", obs, reward, terminated, truncated, info)
#   ("step_same", action)      -> step, and when the episode ended a reset in the same call
#                                 (gymnasium's SAME_STEP autoreset):
#                                 ("step", obs, reward, term, trunc, info, final) with
#                                 final = (final_obs, final_info) or None
# --------------------------------------------------------------------------------------------
class _EnvWorker:
    def __init__(self, env_fns: list[Callable[[], gym.Env]]) -> None:
        import deciplane.envs  # noqa: F401 - registers built-in and plug-in ids here too

        self.envs = [fn() for fn in env_fns]

    def ready(self) -> dict[str, Any]:
        e = self.envs[0]
        return {"pid": os.getpid(), "node": _node_id(),
                "spaces": [(x.observation_space, x.action_space) for x in self.envs],
                "metadata": dict(e.metadata), "render_mode": e.render_mode}

    def pid(self) -> int:
        return os.getpid()

    def run(self, ops: list[tuple[int, str, Any]]) -> list[tuple]:
        out = []
        for j, kind, payload in ops:
            env = self.envs[j]
            if kind == "reset":
                seed, options = payload
                obs, info = env.reset(seed=seed, options=options)
                out.append(("reset", obs, info))
            else:
                obs, rew, term, trunc, info = env.step(payload)
                final = None
                if kind == "step_same" and (term or trunc):
                    final = (obs, info)
                    obs, info = env.reset()
                out.append(("step", obs, float(rew), bool(term), bool(trunc), info, final))
        return out

    def call(self, name: str, args: tuple, kwargs: dict) -> list[Any]:
        res = []
        for env in self.envs:
            fn = env.get_wrapper_attr(name)
            res.append(fn(*args, **kwargs) if callable(fn) else fn)
        return res

    def get_attr(self, name: str) -> list[Any]:
        return [env.get_wrapper_attr(name) for env in self.envs]

    def set_attr(self, j: int, name: str, value: Any) -> None:
        self.envs[j].set_wrapper_attr(name, value)

    def close(self) -> None:
        for env in self.envs:
            env.close()


def _node_id() -> str:
    try:
        import ray

        return ray.get_runtime_context().get_node_id()
    except Exception:  # noqa: BLE001
        return "?"


_ACTOR_CLS: dict[str, Any] = {}


def _actor_class(ray: Any) -> Any:
    if "cls" not in _ACTOR_CLS:
        # max_restarts=0: RayVectorEnv replaces a failed worker itself (it must also kill
        # hung ones and replay their episodes, which Ray's own restart cannot do).
        _ACTOR_CLS["cls"] = ray.remote(max_restarts=0, max_task_retries=0)(_EnvWorker)
    return _ACTOR_CLS["cls"]


def _same(a: Any, b: Any) -> bool:
    """Whether two observations are identical (values, dtypes and shapes)."""
    try:
        return pickle.dumps(a, protocol=5) == pickle.dumps(b, protocol=5)
    except Exception:  # noqa: BLE001 - unpicklable observation: compare by value
        try:
            return bool(np.all(a == b))
        except Exception:  # noqa: BLE001
            return False


def split_blocks(num_envs: int, num_workers: int) -> list[list[int]]:
    """Env indices of each worker: ``num_workers`` contiguous, near-equal blocks."""
    if num_envs < 1:
        raise ConfigError(f"a vector env needs at least one env, got {num_envs}")
    if num_workers < 1:
        raise ConfigError(f"env_workers.num_workers must be >= 1, got {num_workers}")
    w = min(num_workers, num_envs)
    return [list(map(int, b)) for b in np.array_split(np.arange(num_envs), w)]


class RayVectorEnv(gym.vector.VectorEnv):
    """A vector env whose sub-envs run in Ray actors (see the module docstring).

    Arguments:
        env_fns: one factory per sub-env: :class:`EnvSpec` or a picklable callable.
        num_workers: Ray actors to spread the envs over (at most ``len(env_fns)``).
        autoreset_mode: as ``SyncVectorEnv`` (default ``NEXT_STEP``).
        on_failure: ``"retry"`` (replay the interrupted episodes on a fresh worker) or
            ``"drop"`` (end them, truncated and flagged ``info["env_worker_dropped"]``).
        max_retries: worker restarts allowed within one ``reset``/``step`` call.
        step_timeout_s: deadline of one reset/step call (a worker past it is hung).
        start_timeout_s: deadline for a worker to start and build its envs.
        max_replay_ops: longest episode history kept for a replay (longer: dropped).
        num_cpus_per_worker: Ray CPUs reserved by each actor.
        ray_address: cluster to join (default: ``RAY_ADDRESS``, else a local instance;
            see :func:`deciplane.ray_cluster.ensure_ray`). Ignored when Ray is initialised.
        copy: return copies of the batched observations (as ``SyncVectorEnv``).
    """

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], num_workers: int = 1, *,
                 autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
                 on_failure: str = "retry", max_retries: int = 3,
                 step_timeout_s: float = 60.0, start_timeout_s: float = 600.0,
                 max_replay_ops: int = 10_000, num_cpus_per_worker: float = 1.0,
                 ray_address: str | None = None, copy: bool = True) -> None:
        super().__init__()
        if on_failure not in ON_FAILURE:
            raise ConfigError(f"on_failure={on_failure!r}; allowed: {', '.join(ON_FAILURE)}")
        if max_retries < 0:
            raise ConfigError(f"max_retries must be >= 0, got {max_retries}")
        if not (step_timeout_s > 0 and start_timeout_s > 0):
            raise ConfigError("step_timeout_s and start_timeout_s must be > 0 seconds")
        self.env_fns = list(env_fns)
        self.num_envs = len(self.env_fns)
        self.blocks = split_blocks(self.num_envs, int(num_workers))
        self.num_workers = len(self.blocks)
        self.autoreset_mode = (autoreset_mode if isinstance(autoreset_mode, AutoresetMode)
                               else AutoresetMode(autoreset_mode))
        self.on_failure = on_failure
        self.max_retries = int(max_retries)
        self.step_timeout_s = float(step_timeout_s)
        self.start_timeout_s = float(start_timeout_s)
        self.max_replay_ops = int(max_replay_ops)
        self.copy = copy
        self.failures = {"restarts": 0, "crashes": 0, "timeouts": 0,
                         "episodes_retried": 0, "episodes_dropped": 0}

        self._ray = ensure_ray(ray_address)
        self._cls = _actor_class(self._ray)
        self.num_cpus_per_worker = float(num_cpus_per_worker)
        self._where = [(w, j) for w, b in enumerate(self.blocks) for j in range(len(b))]
        n = self.num_envs
        # per env: ops since the last seeded reset (None: cannot be replayed), last obs,
        # whether its state was lost with a worker, whether the next step autoresets
        self._history: list[list | None] = [[] for _ in range(n)]
        self._last_obs: list[Any] = [None] * n
        self._lost = np.zeros(n, dtype=np.bool_)
        self._autoreset_envs = np.zeros(n, dtype=np.bool_)
        self._set_log: dict[tuple[int, str], Any] = {}   # latest set_attr per (env, name)
        self._closed_actors = False

        self._actors: list[Any] = [None] * self.num_workers
        self._info: list[dict] = [{}] * self.num_workers
        self._check_capacity()
        starts = [self._spawn(w) for w in range(self.num_workers)]
        for w, ref in enumerate(starts):
            self._info[w] = self._await_start(w, ref)
        spaces = [s for i in self._info for s in i["spaces"]]
        self.single_observation_space, self.single_action_space = spaces[0]
        for k, (o, a) in enumerate(spaces):
            if o != self.single_observation_space or a != self.single_action_space:
                raise ConfigError(f"sub-env {k} has spaces ({o}, {a}) but sub-env 0 has "
                                  f"({self.single_observation_space}, "
                                  f"{self.single_action_space}); all sub-envs of a vector "
                                  "env must share their observation and action spaces")
        self.observation_space = batch_space(self.single_observation_space, n)
        self.action_space = batch_space(self.single_action_space, n)
        self.metadata = dict(self._info[0]["metadata"])
        self.metadata["autoreset_mode"] = self.autoreset_mode
        self.render_mode = self._info[0]["render_mode"]
        self._observations = create_empty_array(self.single_observation_space, n=n,
                                                fn=np.zeros)

    # ---- workers ----------------------------------------------------------------------------
    def _spawn(self, w: int) -> Any:
        fns = [self.env_fns[i] for i in self.blocks[w]]
        self._actors[w] = self._cls.options(num_cpus=self.num_cpus_per_worker).remote(fns)
        return self._actors[w].ready.remote()

    def _check_capacity(self) -> None:
        """Fail fast when the cluster can never hold the workers (it would wait forever)."""
        need = self.num_workers * self.num_cpus_per_worker
        have = float(self._ray.cluster_resources().get("CPU", 0.0))
        if need > have:
            raise ConfigError(
                f"{self.num_workers} env workers x {self.num_cpus_per_worker:g} CPU need "
                f"{need:g} CPUs but the Ray cluster has {have:g}; lower num_workers or "
                "num_cpus_per_worker (0 = no reservation), or start the nodes first "
                "(an autoscaling cluster: num_cpus_per_worker=0 lets workers queue)")

    def _await_start(self, w: int, ref: Any) -> dict:
        ray = self._ray
        deadline = time.monotonic() + self.start_timeout_s
        warned = False
        while True:
            left = deadline - time.monotonic()
            done, _ = ray.wait([ref], timeout=max(0.0, min(left, 30.0)))
            if done:
                break
            if time.monotonic() >= deadline:
                self._kill(w)
                raise EnvWorkerError(
                    f"env worker {w} did not build its envs within {self.start_timeout_s:.0f} "
                    "s (start_timeout_s); is the cluster short of free CPUs (other actors, "
                    "e.g. a RayVectorEnv not closed, hold them) or is env construction "
                    "hanging?")
            if not warned:
                warned = True
                free = ray.available_resources().get("CPU", 0.0)
                warnings.warn(f"env worker {w} has not started after 30 s; the cluster has "
                              f"{free:g} free CPUs and each worker reserves "
                              f"{self.num_cpus_per_worker:g} (still waiting, up to "
                              f"start_timeout_s={self.start_timeout_s:.0f} s)", stacklevel=3)
        try:
            return ray.get(ref)
        except ray.exceptions.RayActorError as exc:
            raise EnvWorkerError(f"env worker {w} died while building its envs: {exc}"
                                 ) from exc
        except ray.exceptions.RayTaskError as exc:
            raise exc.as_instanceof_cause() from None

    def _kill(self, w: int) -> None:
        actor = self._actors[w]
        self._actors[w] = None
        if actor is not None:
            try:
                self._ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass

    def worker_pids(self) -> list[int]:
        """The OS process id of each worker (they may live on other nodes)."""
        return [int(i["pid"]) for i in self._info]

    def worker_of(self, env_index: int) -> int:
        """Which worker holds sub-env ``env_index``."""
        return self._where[env_index][0]

    def _restart(self, w: int) -> None:
        """Replace worker ``w`` by a fresh actor (same envs, re-applied ``set_attr``s)."""
        self._kill(w)
        self.failures["restarts"] += 1
        self._info[w] = self._await_start(w, self._spawn(w))
        refs = [self._actors[w].set_attr.remote(self._where[i][1], name, value)
                for (i, name), value in self._set_log.items() if self._where[i][0] == w]
        if refs:
            self._get_all(refs, "re-applying set_attr")

    def _recover(self, w: int, replay: bool) -> None:
        """After a restart of ``w``: replay the episodes of its envs (or mark them lost)."""
        envs = [i for i in self.blocks[w] if self._history[i] or self._lost[i]]
        if not replay:
            for i in envs:
                if self._history[i]:
                    self._lost[i] = True
            return
        todo = [i for i in envs if self._history[i] is not None and self._history[i]]
        for i in envs:
            if self._history[i] is None:
                self._lost[i] = True
        if not todo:
            return
        ops = [(self._where[i][1], kind, payload) for i in todo
               for kind, payload in self._history[i]]
        ray = self._ray
        try:
            res = ray.get(self._actors[w].run.remote(ops),
                          timeout=self.step_timeout_s * max(1, len(ops)))
        except ray.exceptions.RayError:  # died, hung or raised during the replay
            self._restart(w)
            for i in todo:
                self._lost[i] = True
            return
        k = 0
        for i in todo:
            k += len(self._history[i])
            if _same(res[k - 1][1], self._last_obs[i]):
                self._lost[i] = False
                self.failures["episodes_retried"] += 1
            else:
                self._lost[i] = True

    def _execute(self, ops: dict[int, tuple[str, Any]], droppable: bool) -> dict[int, tuple]:
        """Run one op per env index, all workers in parallel, surviving worker failures.

        Returns ``{env index: result}``; a step of a lost episode yields ``("dropped",)``.
        """
        ray = self._ray
        results: dict[int, tuple] = {}
        pending = dict(ops)
        for attempt in range(self.max_retries + 1):
            for i in list(pending):
                if self._lost[i] and pending[i][0] != "reset" and droppable:
                    results[i] = ("dropped",)
                    del pending[i]
            if not pending:
                break
            by_worker: dict[int, list[int]] = {}
            for i in sorted(pending):
                by_worker.setdefault(self._where[i][0], []).append(i)
            refs = {w: self._actors[w].run.remote([(self._where[i][1], *pending[i])
                                                   for i in idx])
                    for w, idx in by_worker.items()}
            ready, _ = ray.wait(list(refs.values()), num_returns=len(refs),
                                timeout=self.step_timeout_s)
            ready = set(ready)
            failed: list[int] = []
            for w, ref in refs.items():
                if ref not in ready:
                    self.failures["timeouts"] += 1
                    failed.append(w)
                    continue
                try:
                    out = ray.get(ref)
                except ray.exceptions.RayTaskError as exc:  # the env itself raised
                    raise exc.as_instanceof_cause() from None
                except ray.exceptions.RayError:  # actor died (killed, OOM, node lost...)
                    self.failures["crashes"] += 1
                    failed.append(w)
                    continue
                for i, r in zip(by_worker[w], out):
                    results[i] = r
                    del pending[i]
            if not failed:
                break
            last = attempt == self.max_retries
            for w in failed:
                self._restart(w)
                self._recover(w, replay=self.on_failure == "retry" and not last)
            if last:
                for i in list(pending):
                    if pending[i][0] == "reset" or not droppable:
                        raise EnvWorkerError(
                            f"env worker {self._where[i][0]} failed {self.max_retries + 1} "
                            f"times in one call (sub-env {i}, {pending[i][0]}); see the "
                            "worker logs, raise step_timeout_s if its envs are just slow, "
                            "or max_retries")
                    results[i] = ("dropped",)
                    del pending[i]
        return results

    # ---- gymnasium.vector API ---------------------------------------------------------------
    def reset(self, *, seed: int | list[int | None] | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        n = self.num_envs
        if seed is None:
            seed = [None] * n
        elif isinstance(seed, (int, np.integer)):
            seed = [int(seed) + i for i in range(n)]
        if len(seed) != n:
            raise ValueError(f"If seeds are passed as a list the length must match "
                             f"num_envs={n} but got length={len(seed)}.")
        mask = np.ones(n, dtype=np.bool_)
        if options is not None and "reset_mask" in options:
            options = dict(options)
            mask = options.pop("reset_mask")
            if not isinstance(mask, np.ndarray) or mask.shape != (n,) or mask.dtype != np.bool_:
                raise TypeError(f"options['reset_mask'] must be a bool numpy array of shape "
                                f"({n},), got {mask!r}")
            if not mask.any():
                raise ValueError("options['reset_mask'] must contain at least one True value")
        ops = {i: ("reset", (None if seed[i] is None else int(seed[i]), options))
               for i in range(n) if mask[i]}
        res = self._execute(ops, droppable=False)
        infos: dict[str, Any] = {}
        for i in range(n):
            if not mask[i]:
                continue
            _, obs, info = res[i]
            self._record(i, ops[i], obs)
            self._autoreset_envs[i] = False
            infos = self._add_info(infos, info, i)
        return self._batch(), infos

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        n = self.num_envs
        acts = list(iterate(self.action_space, actions))
        mode = self.autoreset_mode
        ops: dict[int, tuple[str, Any]] = {}
        for i in range(n):
            if mode == AutoresetMode.NEXT_STEP and self._autoreset_envs[i]:
                ops[i] = ("reset", (None, None))
            elif mode == AutoresetMode.DISABLED and self._autoreset_envs[i]:
                raise ValueError(f"sub-env {i} finished its episode and autoreset_mode is "
                                 "DISABLED: reset it (options={'reset_mask': ...}) first")
            else:
                ops[i] = ("step_same" if mode == AutoresetMode.SAME_STEP else "step", acts[i])
        res = self._execute(ops, droppable=True)
        rewards = np.zeros(n, dtype=np.float64)
        terms = np.zeros(n, dtype=np.bool_)
        truncs = np.zeros(n, dtype=np.bool_)
        infos: dict[str, Any] = {}
        follow_up: list[int] = []
        for i in range(n):
            r = res[i]
            if r[0] == "reset":
                _, obs, info = r
                self._record(i, ops[i], obs)
            elif r[0] == "dropped":
                obs, info = self._last_obs[i], {DROPPED_KEY: True}
                truncs[i] = True
                self._lost[i] = False
                self._history[i] = []
                self.failures["episodes_dropped"] += 1
                if mode == AutoresetMode.SAME_STEP:
                    infos = self._add_info(infos, {"final_obs": obs, "final_info": info}, i)
                    follow_up.append(i)
            else:
                _, obs, rewards[i], terms[i], truncs[i], info, final = r
                if final is not None:
                    infos = self._add_info(infos, {"final_obs": final[0],
                                                   "final_info": final[1]}, i)
                self._record(i, ops[i], obs)
            infos = self._add_info(infos, info, i)
        if follow_up:  # SAME_STEP after a drop: the fresh env starts its next episode now
            got = self._execute({i: ("reset", (None, None)) for i in follow_up},
                                droppable=False)
            for i in follow_up:
                self._record(i, ("reset", (None, None)), got[i][1])
                # the reset's info replaces nothing: SAME_STEP reports the step's info
        self._autoreset_envs = np.logical_or(terms, truncs)
        if mode == AutoresetMode.SAME_STEP:
            self._autoreset_envs[:] = False
        return self._batch(), rewards, terms, truncs, infos

    def _record(self, i: int, op: tuple[str, Any], obs: Any) -> None:
        """Append ``op`` to env ``i``'s replay history and remember its observation.

        A seeded reset starts a new history; so does any reset of an env whose state was
        lost with its worker (the fresh env has no past to replay).
        """
        kind, payload = op
        hist = self._history[i]
        if kind == "reset" and (payload[0] is not None or self._lost[i]):
            self._history[i] = [op]
            self._lost[i] = False
        elif hist is not None:
            hist.append(op)
            if len(hist) > self.max_replay_ops:
                self._history[i] = None
        self._last_obs[i] = obs

    def _batch(self) -> Any:
        self._observations = concatenate(self.single_observation_space, self._last_obs,
                                         self._observations)
        if self.copy:
            from copy import deepcopy

            return deepcopy(self._observations)
        return self._observations

    def _get_all(self, refs: list, what: str) -> list:
        """``ray.get`` of per-worker helper calls: env errors as themselves, a dead or hung
        worker as :class:`EnvWorkerError` (helpers are not replayed)."""
        ray = self._ray
        try:
            return ray.get(refs, timeout=self.step_timeout_s)
        except ray.exceptions.RayTaskError as exc:
            raise exc.as_instanceof_cause() from None
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError) as exc:
            raise EnvWorkerError(f"an env worker failed during {what} ({type(exc).__name__}); "
                                 "the next reset/step replaces it") from exc

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call ``name`` (a method, or read an attribute) on every sub-env, in order."""
        out = self._get_all([a.call.remote(name, args, kwargs) for a in self._actors],
                            f"call({name!r})")
        return tuple(x for block in out for x in block)

    def get_attr(self, name: str) -> tuple[Any, ...]:
        out = self._get_all([a.get_attr.remote(name) for a in self._actors],
                            f"get_attr({name!r})")
        return tuple(x for block in out for x in block)

    def set_attr(self, name: str, values: list[Any] | tuple[Any, ...] | Any) -> None:
        """Set an attribute on every sub-env (re-applied to a restarted worker's envs)."""
        if not isinstance(values, (list, tuple)):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise ValueError(f"values must have length num_envs={self.num_envs}, "
                             f"got {len(values)}")
        refs = []
        for i, v in enumerate(values):
            w, j = self._where[i]
            refs.append(self._actors[w].set_attr.remote(j, name, v))
            self._set_log[(i, name)] = v
        self._get_all(refs, f"set_attr({name!r})")

    def render(self) -> tuple[Any, ...] | None:
        return self.call("render")

    def close_extras(self, **kwargs: Any) -> None:
        if self._closed_actors:
            return
        self._closed_actors = True
        ray = self._ray
        refs = [a.close.remote() for a in self._actors if a is not None]
        try:
            ray.wait(refs, num_returns=len(refs), timeout=min(30.0, self.step_timeout_s))
        except Exception:  # noqa: BLE001 - closing must not raise over a dead worker
            pass
        for w in range(self.num_workers):
            self._kill(w)

    def __del__(self) -> None:
        try:
            if not getattr(self, "_closed_actors", True):
                self.close()
        except Exception:  # noqa: BLE001
            pass

    def __repr__(self) -> str:
        return f"RayVectorEnv(num_envs={self.num_envs}, num_workers={self.num_workers})"


def make_ray_vector_env(env_fns: Sequence[Callable[[], gym.Env]], num_workers: int,
                        **kwargs: Any) -> RayVectorEnv:
    """``RayVectorEnv(env_fns, num_workers, autoreset_mode=NEXT_STEP, copy=False, ...)`` —
    the drop-in for ``deciplane``'s in-process ``make_vector_env`` (same autoreset)."""
    kwargs.setdefault("autoreset_mode", AutoresetMode.NEXT_STEP)
    kwargs.setdefault("copy", False)
    return RayVectorEnv(env_fns, num_workers, **kwargs)


__all__ = ["RayVectorEnv", "EnvSpec", "make_ray_vector_env", "split_blocks", "DROPPED_KEY",
           "ON_FAILURE", "require_ray", "ensure_ray"]
