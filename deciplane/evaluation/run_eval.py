"""Score a trained run's checkpoint later: ``deciplane evaluate RUN_DIR``.

A run directory written by ``deciplane train CONFIG --run-dir DIR`` holds the run's config
(``config.yaml``) and checkpoints (``checkpoints/iter_NNNNNN/{meta.json,state.pt}``).
:func:`load_trained_policy` rebuilds the policy exactly as training built it (same model,
LoRA settings, threads) and loads the checkpoint's trainable parameters into it — only
the ``"trainable"`` entry of ``state.pt`` is read: the optimizer, RNG states and any
trainable modules outside the policy (e.g. a value head) are left alone, so checkpoints
that carry more state still load.

Two ways to score it, as the run's method says (``evaluates_on`` and ``greedy`` of its
:class:`~deciplane.methods.MethodSpec`):

* :func:`evaluate_run` — environment runs (``rlid_ppo``: the menu agent, ``text_ppo``: the
  free-text agent), rebuilt with the run's agent settings (history, style, tokens) and
  played greedily on the run's environment (id, kwargs, ``max_episode_steps``) through
  :func:`deciplane.evaluation.evaluate.evaluate_agent`;
* :func:`evaluate_run_benchmark` — single-turn runs (``math_grpo``): greedy answers to a
  benchmark split, with the prompt and token budget of the run's own evaluation, scored
  by the held-out scorer (:func:`deciplane.envs.load_benchmark`).

Both reports record the run directory, the checkpoint name and the split fingerprint.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from deciplane.errors import CheckpointError, ConfigError
from deciplane.engine.rundir import CONFIG_FILE
from deciplane.engine.checkpoint import (CKPT_DIR, latest_checkpoint, list_checkpoints,
                                         run_state_from_payload)
from deciplane.methods import get, load_greedy
from deciplane.utils import resolve_device



def evaluates_on(config: Any) -> str:
    """What a run is scored on after training, as its method says: ``env`` or
    ``benchmark``; a ConfigError for a method that names neither."""
    spec = get(config.algorithm, "train")
    if spec.evaluates_on is None:
        raise ConfigError(f"method {spec.name!r} (from {spec.distribution}) names no "
                          "evaluation (MethodSpec.evaluates_on): its runs are scored only "
                          "by their own summary.json")
    return spec.evaluates_on


@dataclass
class TrainedPolicy:
    """A run's policy with a checkpoint's trainable weights loaded (in eval mode)."""

    run_dir: Path
    checkpoint: Path          # the checkpoint folder (RUN_DIR/checkpoints/iter_NNNNNN)
    config: Any               # the run's TrainConfig (from RUN_DIR/config.yaml)
    policy: Any               # deciplane.agents.Policy
    iteration: int            # completed training iterations at the checkpoint

    @property
    def checkpoint_name(self) -> str:
        return self.checkpoint.name


# ---- run directory and checkpoint --------------------------------------------------------


def read_run_config(run_dir: str | Path) -> Any:
    """The :class:`~deciplane.trainers.config.TrainConfig` a run was trained with."""
    from deciplane.trainers.config import load_config

    run = Path(run_dir)
    if not run.is_dir():
        raise CheckpointError(f"{run} does not exist; pass the --run-dir of a "
                              "`deciplane train` run")
    cfg = run / CONFIG_FILE
    if not cfg.is_file():
        raise CheckpointError(f"{run} is not a run directory (no {CONFIG_FILE}); pass the "
                              "folder given to `deciplane train CONFIG --run-dir DIR`")
    return load_config(cfg)


def resolve_checkpoint(run_dir: str | Path, checkpoint: str = "latest") -> Path:
    """The checkpoint folder named by ``checkpoint``: ``latest``, ``iter_N`` or ``N``
    (``iter_12`` and ``iter_000012`` are the same checkpoint)."""
    run = Path(run_dir)
    available = list_checkpoints(run)
    if not available:
        raise CheckpointError(f"{run} has no checkpoint (no complete {CKPT_DIR}/iter_*/); "
                              "train at least one iteration (checkpoint.every) or resume "
                              f"the run with `deciplane train --resume --run-dir {run}`")
    text = str(checkpoint).strip()
    if text == "latest":
        last = latest_checkpoint(run)
        assert last is not None
        return last
    digits = text[len("iter_"):] if text.startswith("iter_") else text
    if not digits.isdigit():
        raise CheckpointError(f"--checkpoint {text!r} is not 'latest', 'iter_N' or N; "
                              f"available: {', '.join(p.name for p in available)}")
    for p in available:
        if int(p.name[len("iter_"):]) == int(digits):
            return p
    raise CheckpointError(f"{run} has no checkpoint {text!r}; available: "
                          f"{', '.join(p.name for p in available)} (older ones are deleted "
                          "after checkpoint.keep_last)")


def read_policy_state(checkpoint: str | Path) -> tuple[dict[str, Any], int]:
    """``(trainable parameters, completed iterations)`` of a checkpoint folder; nothing
    else of ``state.pt`` is used (memory-mapped, so optimizer state is not read in)."""
    import torch

    f = Path(checkpoint) / "state.pt"
    try:
        payload = torch.load(f, map_location="cpu", weights_only=False, mmap=True)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means corrupt
        raise CheckpointError(f"{f} cannot be read ({e}); pick another checkpoint with "
                              "--checkpoint iter_N") from e
    state = run_state_from_payload(payload, f)
    return state.params, state.step


def check_shapes(model: Any, state: dict[str, Any]) -> None:
    """Raise :class:`CheckpointError` when a saved tensor's shape differs from the model's
    parameter of the same name (e.g. another LoRA rank); names are checked on loading."""
    params = dict(model.named_parameters())
    for name, t in state.items():
        p = params.get(name)
        if p is not None and tuple(p.shape) != tuple(t.shape):
            raise CheckpointError(f"parameter {name!r} has shape {tuple(t.shape)} in the "
                                  f"checkpoint but {tuple(p.shape)} in the model built from "
                                  "the run's config; rebuild with the model and LoRA settings "
                                  "the run trained with")


def load_trained_policy(run_dir: str | Path, checkpoint: str = "latest",
                        threads: int | None = None,
                        trunk_dtype: str | None = None,
                        device: str | None = None) -> TrainedPolicy:
    """Rebuild a run's policy from its config and load a checkpoint's trainable weights.

    ``checkpoint``: ``latest`` | ``iter_N`` | ``N``. ``threads``: torch threads (default:
    the run's ``model.threads``). ``trunk_dtype``: ``auto | float32 | bfloat16`` for the
    frozen layers (default: the run's ``model.trunk_dtype``). ``device``: where the model
    runs (default: the run's ``model.device``; a device this machine lacks is a
    ConfigError before anything loads). Like training, this seeds python/numpy/torch with the
    run's seed before building the model. Raises :class:`CheckpointError` for a folder
    that is not a run directory, a run without checkpoints, or weights that do not fit.
    """
    import torch

    from deciplane.engine.checkpoint import load_trainable_state
    from deciplane.trainers.run import build_policy

    run = Path(run_dir)
    config = read_run_config(run)
    if trunk_dtype is not None:
        config.model.trunk_dtype = trunk_dtype
    if device is not None:
        config.model.device = device
    resolve_device(config.model.device)    # e.g. a GPU run scored on a CPU-only machine
    path = resolve_checkpoint(run, checkpoint)
    state, iteration = read_policy_state(path)
    policy = build_policy(config)
    if threads is not None:
        torch.set_num_threads(int(threads))
    try:
        check_shapes(policy.model, state)
        load_trainable_state(policy.model, state)
    except CheckpointError as e:
        raise CheckpointError(f"{path}: {e} (was {run / CONFIG_FILE} edited after "
                              "training?)") from None
    policy.model.eval()
    for p in policy.model.parameters():
        p.requires_grad_(False)
    return TrainedPolicy(run_dir=run, checkpoint=path, config=config, policy=policy,
                         iteration=iteration)


# ---- environment runs --------------------------------------------------------------------


def eval_agent_for(trained: TrainedPolicy, seed: int = 0) -> Any:
    """The greedy evaluation agent the run trained (its method's ``greedy``: the menu agent
    of ``rlid_ppo``, the free-text agent of ``text_ppo``) with the run's prompt settings,
    behind ``act_batch``."""
    from deciplane.agents.text import TextAgent
    from deciplane.evaluation.agents import MenuEvalAgent, TextEvalAgent

    c = trained.config
    if evaluates_on(c) != "env":
        raise ConfigError(f"run {trained.run_dir} trained {c.algorithm!r}, not an "
                          "environment agent; score it with --benchmark NAME")
    agent = load_greedy(get(c.algorithm))(c, trained.policy)
    if isinstance(agent, TextAgent):
        return TextEvalAgent(agent, seed=seed, name=f"text-{agent.style}[{c.model.name}]")
    return MenuEvalAgent(agent, seed=seed, name=f"menu[{c.model.name}]")


def run_env(config: Any, name: str | None = None) -> Any:
    """The env section of a run to evaluate on: its ``env:``, or the ``envs:`` entry called
    ``name`` in a suite run (which must name one)."""
    entries = getattr(config, "envs", None) or []
    names = [e.name for e in entries]
    if not entries:
        if name is not None:
            raise ConfigError(f"--env {name}: the run trained on one env ({config.env.id}); "
                              "--env names an env of a suite run (envs:)")
        return config.env
    if name not in names:
        raise ConfigError(f"the run trained on a suite of envs: pick one with --env NAME "
                          f"({', '.join(names)})" if name is None else
                          f"--env {name}: the run's envs are {', '.join(names)}")
    return entries[names.index(name)]


def run_env_kwargs(config: Any, split: str | None,
                   overrides: dict[str, Any] | None = None, env: str | None = None
                   ) -> tuple[str | None, dict[str, Any]]:
    """``(split or None, gym.make kwargs)`` for evaluating a run on its environment (a suite
    run: on its env ``env``, the split under that env's own name): the run's ``env.kwargs``
    (updated by ``overrides``) with the trainer's menu defaults
    (``deciplane.trainers.env_suite.MENU_DEFAULTS``) and ``max_episode_steps``. The split is
    dropped where the env does not take it (no splits, or a list of game files:
    :func:`deciplane.envs.splits.split_kwargs`)."""
    from deciplane.envs.splits import env_params, split_kwargs
    from deciplane.trainers.env_suite import with_menu_defaults

    section = run_env(config, env)
    if split is not None and hasattr(section, "split"):
        split = section.split(split)
    kwargs = dict(section.kwargs)
    kwargs.update(overrides or {})
    # the menus the trainer evaluated on (shuffled, task text), unless the run set them
    kwargs = with_menu_defaults(kwargs, env_params(section.id))
    kwargs["max_episode_steps"] = section.max_episode_steps
    if "split" not in split_kwargs(section.id, split, kwargs):
        split = None
    return split, kwargs


def evaluate_run(run_dir: str | Path, checkpoint: str = "latest", split: str = "test",
                 episodes: int | None = None, num_envs: int = 1, seed: int = 0,
                 env_overrides: dict[str, Any] | None = None, threads: int | None = None,
                 trunk_dtype: str | None = None, device: str | None = None,
                 progress: bool = False, trained: TrainedPolicy | None = None,
                 env: str | None = None) -> Any:
    """Evaluate an environment run's checkpoint on ``split``; returns an
    :class:`~deciplane.evaluation.evaluate.EvalReport` with ``run_dir`` and ``checkpoint``
    set. ``episodes`` defaults to every game of the split once (else 20 seeds);
    ``env_overrides`` replace keys of the run's ``env.kwargs`` (e.g. another games preset);
    ``env`` names the env of a suite run (:func:`run_env`). Pass ``trained`` to reuse an
    already loaded policy."""
    from deciplane.evaluation.evaluate import evaluate_agent

    config = read_run_config(run_dir) if trained is None else trained.config
    if evaluates_on(config) != "env":
        raise ConfigError(f"{run_dir} is a single-turn run ({config.algorithm}), not an "
                          f"environment run; score it with `deciplane evaluate {run_dir} "
                          f"--benchmark {getattr(config, 'benchmark', 'NAME')}`")
    section = run_env(config, env)      # a suite run without --env: refused before loading
    if trained is None:
        trained = load_trained_policy(run_dir, checkpoint, threads=threads,
                                      trunk_dtype=trunk_dtype, device=device)
    agent = eval_agent_for(trained, seed=seed)
    env_split, kwargs = run_env_kwargs(config, split, env_overrides, env=env)
    report = evaluate_agent(section.id, agent, split=env_split, episodes=episodes,
                            num_envs=num_envs, seed=seed, env_kwargs=kwargs, progress=progress)
    report.run_dir = str(trained.run_dir)
    report.checkpoint = trained.checkpoint_name
    return report


# ---- single-turn (benchmark) runs --------------------------------------------------------


@dataclass
class BenchmarkEvalReport:
    """Greedy answers of a run's checkpoint on a benchmark split, held-out scored."""

    run_dir: str
    checkpoint: str
    iteration: int
    model: str
    benchmark: str
    trained_on: str           # the benchmark the run was trained on
    split: str
    split_fingerprint: str
    count: int
    n_correct: int
    accuracy: float
    max_new_tokens: int
    wall_s: float
    per_task: list[dict[str, Any]] = field(default_factory=list)  # id, answer, correct

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        return (f"{self.model} ({self.run_dir}, {self.checkpoint}) on {self.benchmark} "
                f"[{self.split}, fingerprint {self.split_fingerprint}]: accuracy "
                f"{self.accuracy:.1%} ({self.n_correct}/{self.count})")


def evaluate_run_benchmark(run_dir: str | Path, benchmark: str | None = None,
                           checkpoint: str = "latest", split: str = "test",
                           limit: int | None = None, threads: int | None = None,
                           trunk_dtype: str | None = None, device: str | None = None,
                           trained: TrainedPolicy | None = None) -> BenchmarkEvalReport:
    """Score a single-turn run's checkpoint on ``benchmark`` (default: the one it trained
    on): greedy answers with the run's prompt and ``eval_max_new_tokens``, the first
    ``limit`` tasks of ``split`` (default all), gold only in the held-out scorer."""
    from deciplane.envs import load_benchmark

    config = read_run_config(run_dir) if trained is None else trained.config
    if evaluates_on(config) != "benchmark":
        raise ConfigError(f"{run_dir} is an environment run ({config.algorithm} on "
                          f"{config.env.id}), not a benchmark run; drop --benchmark to evaluate "
                          f"it on its environment (`deciplane evaluate {run_dir} --split "
                          f"{split}`)")
    if limit is not None and limit < 1:
        raise ConfigError(f"--limit must be >= 1, got {limit}")
    name = benchmark or config.benchmark
    t0 = time.perf_counter()
    tasks, scorer = load_benchmark(name, split, limit=limit)  # checks name/split first
    try:
        if trained is None:
            trained = load_trained_policy(run_dir, checkpoint, threads=threads,
                                      trunk_dtype=trunk_dtype, device=device)
        texts = load_greedy(get(config.algorithm))(trained.policy, [t.prompt for t in tasks],
                                                   config.eval_max_new_tokens)
        answers = {t.id: a for t, a in zip(tasks, texts)}
        report = scorer.score(answers)
    finally:
        scorer.close()
    per_task = [{"id": t.id, "answer": answers[t.id], "correct": bool(report.correct[t.id])}
                for t in tasks]
    return BenchmarkEvalReport(
        run_dir=str(trained.run_dir), checkpoint=trained.checkpoint_name,
        iteration=trained.iteration, model=config.model.name, benchmark=name,
        trained_on=config.benchmark, split=split, split_fingerprint=report.split_fingerprint,
        count=report.count, n_correct=report.n_correct, accuracy=report.accuracy,
        max_new_tokens=config.eval_max_new_tokens, wall_s=time.perf_counter() - t0,
        per_task=per_task)


def recorded_fingerprint(run_dir: str | Path, split: str | None, env: str | None = None
                         ) -> str | None:
    """The split fingerprint the run's ``summary.json`` recorded for ``split`` (of the
    suite's env ``env``) at training time (``None`` when the run has no summary or did not
    evaluate that split)."""
    f = Path(run_dir) / "summary.json"
    if split is None or not f.is_file():
        return None
    try:
        fps = json.loads(f.read_text()).get("split_fingerprints") or {}
    except (OSError, ValueError):
        return None
    return fps.get(split if env is None else f"{env}/{split}")
