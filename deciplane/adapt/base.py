"""The adapter protocol and what every test-time adapter shares (docs/methods.md §5).

An adapter gets a :class:`~deciplane.agents.Policy`, a config and a list of
:class:`~deciplane.types.UnlabeledTask` (id, prompt, meta — no gold) and returns final
answers ``{task_id: answer}``. Nothing in this API leads to a scorer or to gold: an
adapter's constructor takes a policy and a config only, and ``run`` takes tasks only.
The caller scores the answers afterwards (see :mod:`deciplane.adapt.runner`).

Everything an adapter spends is counted in ``adapter.budget`` (a
:class:`~deciplane.engine.budget.Budget`); extra generations made only to draw the
accuracy-vs-steps curve go to ``adapter.eval_budget`` instead. What the adapter saw
(majority votes, per-sample pseudo-rewards, intermediate answers) is kept in
``adapter.records`` so that gold-side diagnostics can be computed *by the scorer* after
the run.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import math
import random
import time
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Protocol, Sequence, runtime_checkable

import torch

from deciplane.adapt.guard import CollapseGuard, step_signals
from deciplane.errors import ConfigError
from deciplane.options import check_options, learning_rate, option
from deciplane.engine.budget import Budget
from deciplane.engine.checkpoint import RunState
from deciplane.engine.generation import generate, generate_texts, sample_groups
from deciplane.engine.optim import Optimizer
from deciplane.engine.loop import COMPLETED, StepResult, run_steps
from deciplane.engine.method import Method
from deciplane.engine.plan import room_for_iteration, wall_time_status
from deciplane.engine.rundir import RunDir
from deciplane.types import Trajectory, UnlabeledTask
from deciplane.utils import rng_state, set_rng_state

log = logging.getLogger(__name__)

@runtime_checkable
class Adapter(Protocol):
    """Test-time adaptation on prompts only: ``run(tasks) -> {task_id: final answer}``."""

    def run(self, tasks: list[UnlabeledTask]) -> dict[str, str]:  # pragma: no cover - protocol
        ...


# ---------------------------------------------------------------------------------------
# Config
# ---------------------------------------------------------------------------------------


@dataclass
class AdaptConfig:
    """Options every adapter has. Defaults are sized for a 2-core CPU; the paper values
    of each adapter are in its ``PAPER`` mapping (``Config.paper()`` builds them)."""

    finetune: Literal["lora", "full"] = "lora"
    """`lora`: add LoRA adapters to the policy (if it has none) and train only them; `full`: train every weight."""
    lora_rank: int = option(16, ge=1)
    """LoRA rank (finetune=lora)."""
    lora_alpha: int = option(32, ge=1)
    """LoRA alpha (finetune=lora)."""
    trunk_dtype: Literal["auto", "float32", "bfloat16"] = "float32"
    """Precision of the frozen weights: `bfloat16` runs every frozen linear layer (LoRA's base weights, or the whole model under TASCO's prefix) in bf16 weights with fp32 inputs and outputs; trainable weights, the embedding, the output layer, norms and attention stay fp32. `auto`: bfloat16 where the CPU has native bf16 (`deciplane doctor`), else float32. Baselines are answered by the same model. Nothing is frozen under finetune=full: it stays fp32. Default float32: with bf16 TTRL matched fp32 on products-1d (0.817 vs 0.820, 3 seeds) but TTPO fell (0.523 vs 0.733; one seed collapsed), benchmarks/results/tta_table_bf16.md."""
    compute_dtype: Literal["float32", "bfloat16"] = "float32"
    """Precision of the matmuls of layers still in fp32 weights (finetune=full; with trunk_dtype=float32 also LoRA's): `bfloat16` runs each decoder layer under torch.autocast (fp32 master weights, bf16 matmuls in sampling, the forward and the backward; logits stay fp32). Only on a CPU with native bf16 or a GPU."""
    lr: float = learning_rate(1e-4)
    """AdamW learning rate."""
    weight_decay: float = option(0.0, ge=0)
    """AdamW weight decay."""
    max_grad_norm: float = option(1.0, ge=0)
    """Global gradient-norm clip before every optimizer step (0 = off)."""
    max_new_tokens: int = option(24, ge=1)
    """Tokens generated per response (samples and final answers)."""
    temperature: float = option(0.7, gt=0)
    """Sampling temperature of the votes / training samples (also divides the logits in the loss); 0.7 is where SmolLM2-135M's maj@8 clearly beats its pass@1 (DESIGN.md)."""
    top_p: float = option(1.0, gt=0, le=1)
    """Nucleus sampling threshold."""
    prompts_per_step: int = option(4, ge=1)
    """Prompts per optimizer step (CPU default 4: with max_steps=12 the adapter draws 12 x 4 x votes samples, and the equal-budget majority baseline as many again)."""
    epochs: int = option(1, ge=1)
    """Passes over the task list (the order is shuffled per epoch with the seed)."""
    max_steps: int | None = option(12, ge=1)
    """Stop after this many steps (null = epochs x ceil(tasks / prompts_per_step)). The CPU default 12 x 4 prompts trains on 48 prompts of a 200-task split (every task is still answered) so that a run with its baselines fits ~15 min on 2 CPU cores; `--set max_steps=null prompts_per_step=8` trains one full pass."""
    max_wall_time_s: float | None = option(None, gt=0)
    """Wall-time limit of the adaptation (its steps, the guard's probes, the curve's answer sets and the final answers; the baselines around it are not counted): a step starts only if it (taken as long as the longest step so far) and the final answers (estimated from the guard's probe: its seconds per task x the tasks; nothing with guard=false) still fit; the tasks are then answered by the state reached. The summary's `status` says how the steps ended; null = no limit."""
    micro_batch_size: int = option(8, ge=1)
    """Sequences per forward pass during updates."""
    final_answer: Literal["greedy", "majority"] = "greedy"
    """How the adapted policy answers: one greedy response, or a majority vote over `final_votes` samples."""
    final_votes: int = option(8, ge=1)
    """Samples per task for final_answer=majority."""
    checkpoints: int = option(0, ge=0)
    """Intermediate greedy answer sets recorded for the accuracy-vs-steps curve (scored after the run; not counted in the adapter's budget). Each costs one greedy answer per task (200 on arith-shift), so the CPU default is 0: the curve is then before -> after."""
    answer_batch: int = option(32, ge=1)
    """Prompts per generation call when answering."""
    system_prompt: str | None = None
    """System message for the chat template (null = the model's default)."""
    instruction: str = ""
    """Text appended to every task prompt (e.g. an answer-format hint); empty = the prompt as given."""
    seed: int = 0
    """Seed of the task order and of every sampling call."""
    guard: bool = True
    """Stop and roll back to the last healthy state when unlabeled signals show a collapse (deciplane.adapt.guard; ours, not the papers'): after every update the greedy answers of a probe set are checked. The summary's `collapse` says what fired ({} when nothing did); the probe's cost is `guard_budget`, apart from the adapter's."""
    guard_probe: int = option(8, ge=1)
    """Tasks in the guard's probe set (the run's first ones), answered greedily after every update."""
    guard_length_ratio: float = option(0.4, gt=0, le=1)
    """A state is unhealthy when its probe answers are shorter than this times the starting state's (TTRL's healthy answers shrink to ~0.6x)."""
    guard_extractable_drop: float = option(0.3, ge=0, le=1)
    """... or when the share of probe answers with an extractable answer fell by more than this."""
    guard_patience: int = option(2, ge=1)
    """Unhealthy states in a row before the guard stops the run."""

    PAPER: typing.ClassVar[dict[str, Any]] = {}

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the field and the allowed values (each
        field's declared range and choices, :func:`deciplane.options.check_options`)."""
        check_options(self, f"{type(self).__name__}.")

    @classmethod
    def paper(cls, **overrides: Any):
        """The config with the paper's values (far too large for a CPU), plus overrides.
        ``PAPER`` keys are dotted where the value sits in the embedded loss config
        (``"loss.lam"``)."""
        from deciplane.config import from_dict

        config = from_dict(cls, cls.paper_options(), f"{cls.__name__}.")
        return dataclasses.replace(config, **overrides) if overrides else config

    @classmethod
    def paper_options(cls) -> dict[str, Any]:
        """``PAPER`` as a nested mapping (dotted keys become sections), as a config file
        would give it."""
        from deciplane.config import set_dotted

        raw: dict[str, Any] = {}
        for key, value in cls.PAPER.items():
            set_dotted(raw, key, value)
        return raw

    def changed_from_paper(self) -> dict[str, dict[str, Any]]:
        """``{option: {"paper": value, "used": value}}`` for every paper value not used."""
        used = {k: _dotted_get(self, k) for k in self.PAPER}
        return {k: {"paper": v, "used": used[k]} for k, v in self.PAPER.items() if used[k] != v}


def _dotted_get(obj: Any, key: str) -> Any:
    for part in key.split("."):
        obj = getattr(obj, part)
    return obj


# ---------------------------------------------------------------------------------------
# Records (adapter side: no gold anywhere)
# ---------------------------------------------------------------------------------------


@dataclass
class VoteRecord:
    """One prompt's vote during adaptation (predictions only)."""

    step: int
    task_id: str
    majority: str | None
    answers: list[str | None]
    rewards: list[float]
    tie: bool
    tied: list[str]


@dataclass
class AdaptRecords:
    """What an adapter saw and did; the runner hands parts of it to the scorer after the
    run (label accuracy of the votes, reward accuracy)."""

    votes: list[VoteRecord] = field(default_factory=list)
    checkpoints: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    history: list[dict[str, float]] = field(default_factory=list)
    skipped_prompts: int = 0
    ties: int = 0

    def last_labels(self) -> dict[str, str | None]:
        """The latest majority answer of each task (None = no valid vote)."""
        out: dict[str, str | None] = {}
        for v in self.votes:
            out[v.task_id] = v.majority
        return out

    def first_labels(self) -> dict[str, str | None]:
        """Each task's first majority answer (the vote of the least-adapted policy)."""
        out: dict[str, str | None] = {}
        for v in self.votes:
            out.setdefault(v.task_id, v.majority)
        return out

    def reward_samples(self) -> dict[str, list[tuple[str | None, float]]]:
        """``{task_id: [(answer, pseudo reward), ...]}`` over every vote of the run."""
        out: dict[str, list[tuple[str | None, float]]] = {}
        for v in self.votes:
            out.setdefault(v.task_id, []).extend(zip(v.answers, v.rewards))
        return out


# ---------------------------------------------------------------------------------------
# Shared adapter machinery
# ---------------------------------------------------------------------------------------


def extract(texts: Sequence[str]) -> list[str | None]:
    """Answers by the allowed rules only (boxed > "the answer is" > last number)."""
    from deciplane.envs.math.answers import extract_answer

    return [extract_answer(t) for t in texts]


def vote(answers: Sequence[str | None]):
    """Majority over predictions only (:func:`deciplane.envs.math.answers.majority_vote`):
    None/empty dropped first, equivalence clusters, deterministic ties."""
    from deciplane.envs.math.answers import majority_vote

    return majority_vote(list(answers))


def majority_answers(policy, prompts: Sequence[str], *, votes: int, max_new_tokens: int,
                     temperature: float, top_p: float, seed: int, budget: Budget,
                     prompts_per_batch: int = 8) -> tuple[list[str], list[list[str | None]]]:
    """Sample ``votes`` responses per prompt and return ``(majority answers ("" where no
    valid vote), per-prompt extracted answers)``."""
    gens = generate(policy, prompts, max_new_tokens=max_new_tokens, temperature=temperature,
                    do_sample=True, num_return_sequences=votes, top_p=top_p, seed=seed,
                    budget=budget, prompts_per_batch=prompts_per_batch)
    per: list[list[str | None]] = [[] for _ in prompts]
    for g, a in zip(gens, extract([g.text for g in gens])):
        per[g.prompt_index].append(a)
    return [vote(a).answer or "" for a in per], per


class BaseAdapter(Method):
    """Steps, answering, checkpoints and records of a
    :class:`~deciplane.engine.method.Method` of the ``adapt`` family; subclasses implement
    :meth:`adapt_step` (one optimizer step on a batch of tasks)."""

    kind = "adapt"
    Config: type[AdaptConfig] = AdaptConfig

    clock: Callable[[], float] = time.perf_counter
    """The step loop's clock: the wall time a checkpoint records, the time plan's elapsed
    time and its step timer (a test may set a fake one)."""

    def __init__(self, policy, config: AdaptConfig | None = None,
                 progress: Callable[[int, int, dict], None] | None = None):
        self.policy = policy
        self.config = config if config is not None else self.Config()
        if not isinstance(self.config, self.Config):
            raise ConfigError(f"{type(self).__name__} needs a {self.Config.__name__}, got "
                              f"{type(self.config).__name__}")
        self.budget = Budget()
        self.eval_budget = Budget()
        self.guard_budget = Budget()
        self.records = AdaptRecords()
        self.progress = progress
        self.step_count = 0
        self.status: str | None = None   # how run()'s steps ended (summary.json `status`)
        self._probe_s_max = 0.0            # the longest guard probe: the time plan's reserve
        cfg = self.config
        self.guard = CollapseGuard(length_ratio=cfg.guard_length_ratio,
                                   extractable_drop=cfg.guard_extractable_drop,
                                   patience=cfg.guard_patience, enabled=cfg.guard)
        self._prepare_policy()

    # -- setup ----------------------------------------------------------------------------
    def _prepare_policy(self) -> None:
        cfg = self.config
        if cfg.finetune == "lora" and not self.policy.is_lora:
            self.policy.add_lora(r=cfg.lora_rank, alpha=cfg.lora_alpha)
        elif cfg.finetune == "full" and self.policy.is_lora:
            raise ConfigError("finetune='full' but the policy has LoRA adapters; load it without "
                              "lora= or use finetune='lora'")
        if cfg.finetune == "full":
            for p in self.policy.model.parameters():
                p.requires_grad_(True)
        self._cast_frozen()

    def _cast_frozen(self) -> None:
        """``trunk_dtype``: the frozen linear layers in bf16 (after adapters are added)."""
        from deciplane.agents.precision import (autocast_layers, cast_frozen_linears,
                                                resolve_trunk_dtype)

        dtype = resolve_trunk_dtype(self.config.trunk_dtype, self.policy.device)
        self.frozen_dtype = str(dtype).removeprefix("torch.")
        self.frozen_linears_cast = cast_frozen_linears(self.policy.model, dtype)
        if self.config.compute_dtype != "float32":
            autocast_layers(self.policy.model, getattr(torch, self.config.compute_dtype))
            self.frozen_dtype += f"+autocast-{self.config.compute_dtype}"   # baseline key

    def format(self, task: UnlabeledTask, hint: str | None = None) -> str:
        """The chat-formatted prompt of a task (``hint`` appended on its own line, e.g.
        TTPO's teacher context ``"answer: 7"``)."""
        text = task.prompt + (f"\n{self.config.instruction}" if self.config.instruction else "")
        if hint:
            text = f"{text}\n\n{hint}"
        return self.policy.format_prompt(text, system=self.config.system_prompt)

    # -- schedule -------------------------------------------------------------------------
    def steps_per_epoch(self, n_tasks: int) -> int:
        return math.ceil(n_tasks / self.config.prompts_per_step)

    def planned_steps(self, n_tasks: int) -> int:
        total = self.config.epochs * self.steps_per_epoch(n_tasks)
        return min(total, self.config.max_steps) if self.config.max_steps else total

    def samples_per_prompt(self) -> int:
        """Responses sampled per prompt visit (votes); subclasses override."""
        raise NotImplementedError

    def planned_samples(self, n_tasks: int) -> int:
        """Samples the run will draw: prompt visits x samples per visit, plus the final
        answers (1 greedy or ``final_votes`` per task)."""
        visits = 0
        for batch in self._batches(n_tasks):
            visits += len(batch)
        final = 1 if self.config.final_answer == "greedy" else self.config.final_votes
        return visits * self.samples_per_prompt() + n_tasks * final

    def _batches(self, n_tasks: int) -> list[list[int]]:
        """Task indices per step: epochs of seeded shuffles, cut at max_steps."""
        cfg = self.config
        out: list[list[int]] = []
        for epoch in range(cfg.epochs):
            order = list(range(n_tasks))
            random.Random(f"{cfg.seed}/{epoch}").shuffle(order)
            for i in range(0, n_tasks, cfg.prompts_per_step):
                out.append(order[i:i + cfg.prompts_per_step])
        return out[:self.planned_steps(n_tasks)]

    def checkpoint_steps(self, n_steps: int) -> list[int]:
        """Steps after which intermediate answers are recorded (the last is the final)."""
        c = self.config.checkpoints
        return sorted({max(1, round(n_steps * j / (c + 1))) for j in range(1, c + 1)} - {n_steps})

    # -- answering ------------------------------------------------------------------------
    def answer(self, tasks: Sequence[UnlabeledTask], budget: Budget | None = None) -> dict[str, str]:
        """Final answers of the current policy (extracted by the allowed rules; "" when
        none), counted in ``budget`` (default: the adapter's budget)."""
        cfg = self.config
        budget = self.budget if budget is None else budget
        prompts = [self.format(t) for t in tasks]
        if cfg.final_answer == "greedy":
            texts = generate_texts(self.policy, prompts, max_new_tokens=cfg.max_new_tokens,
                                   greedy=True, budget=budget, prompts_per_batch=cfg.answer_batch)
            answers = [a or "" for a in extract(texts)]
        else:
            answers, _ = majority_answers(self.policy, prompts, votes=cfg.final_votes,
                                          max_new_tokens=cfg.max_new_tokens,
                                          temperature=cfg.temperature, top_p=cfg.top_p,
                                          seed=cfg.seed + 7_777_777, budget=budget,
                                          prompts_per_batch=max(1, cfg.answer_batch // cfg.final_votes))
        return {t.id: a for t, a in zip(tasks, answers)}

    # -- the loop -------------------------------------------------------------------------
    def adapt_step(self, tasks: list[UnlabeledTask], step: int) -> dict[str, float]:
        raise NotImplementedError

    # -- resume state -------------------------------------------------------------------
    def resume_optimizer(self):
        """The adapter's :class:`~deciplane.engine.optim.Optimizer` (what a resume restores);
        ``None``: this adapter keeps no resumable state (``run`` then writes none)."""
        return getattr(self, "optimizer", None)

    def trainable_named_parameters(self) -> dict[str, Any]:
        """The parameters the adapter trains, by name (LoRA adapters or all weights)."""
        return {n: p for n, p in self.policy.model.named_parameters() if p.requires_grad}

    def run_state(self) -> RunState:
        """Everything the step loop needs to go on after ``step_count`` steps as if it had
        never stopped, in the checkpoint format every method shares: trained parameters,
        optimizer (moments; its step counts as ``counters``), the RNG states and, as the
        method's own state, budgets, records, the guard and :meth:`own_state`."""
        opt = self.resume_optimizer()
        return RunState(
            step=self.step_count,
            params={n: p.detach().clone() for n, p in self.trainable_named_parameters().items()},
            optimizer=opt.state_dict(), rng=rng_state(),
            counters={"optimizer_steps": opt.steps, "skipped_steps": opt.skipped},
            method={"budget": copy.deepcopy(self.budget),
                    "eval_budget": copy.deepcopy(self.eval_budget),
                    "records": copy.deepcopy(self.records), "extra": self.own_state(),
                    "guard": copy.deepcopy(self.guard.state()),
                    "guard_budget": copy.deepcopy(self.guard_budget)})

    def restore(self, state: RunState) -> None:
        """Go back to ``state``: :meth:`run_state` of this adapter, or an adapter state
        written before the shared format
        (:func:`~deciplane.engine.checkpoint.run_state_from_payload` reads both)."""
        params = self.trainable_named_parameters()
        if set(params) != set(state.params):
            raise ConfigError("the saved adapter state does not match this adapter's trainable "
                              "parameters; resume with the same model, method and options")
        with torch.no_grad():
            for n, p in params.items():
                p.copy_(state.params[n])
        opt = self.resume_optimizer()
        opt.load_state_dict(state.optimizer)
        opt.steps, opt.skipped = state.counters["optimizer_steps"], state.counters["skipped_steps"]
        own = state.method
        # the optimizer counts into self.budget: keep that object, restore its fields
        for name, target in (("budget", self.budget), ("eval_budget", self.eval_budget)):
            target.__dict__.update(copy.deepcopy(own[name].__dict__))
        self.records = own["records"]
        self.step_count = state.step
        set_rng_state(state.rng)
        self.load_own_state(own["extra"])
        if "guard" in own:          # states written before the guard existed have none
            self.guard.load(own["guard"])
            self.guard_budget.__dict__.update(copy.deepcopy(own["guard_budget"].__dict__))

    def run(self, tasks: list[UnlabeledTask], run_dir: str | Path | None = None) -> dict[str, str]:
        """Adapt on the prompts of ``tasks`` and return ``{task_id: final answer}``.

        ``run_dir``: the run directory every method's run keeps
        (:class:`~deciplane.engine.rundir.RunDir`): every step's metrics in
        ``RUN_DIR/metrics.jsonl`` and the adapter's :meth:`run_state` in
        ``RUN_DIR/checkpoints/`` (the last one kept); if a checkpoint exists when ``run``
        starts, the run resumes after its last step (same tasks, same options) and ends
        with the answers an uninterrupted run gives."""
        tasks = list(tasks)
        if not tasks:
            raise ConfigError("run() got no tasks; pass the unlabeled tasks of a benchmark split")
        for t in tasks:
            if not isinstance(t, UnlabeledTask):
                raise ConfigError(f"run() takes UnlabeledTask objects (id, prompt, meta), got "
                                  f"{type(t).__name__}")
        batches = self._batches(len(tasks))
        resumable = run_dir is not None and self.resume_optimizer() is not None
        if run_dir is not None and not resumable:
            log.warning("%s has no optimizer to checkpoint; it cannot be resumed", type(self).__name__)
        rundir = None if run_dir is None else RunDir(run_dir)
        done = 0
        if resumable:
            saved = rundir.latest_state(map_location=self.policy.device)
            if saved is not None:
                self.restore(saved)
                done = self.step_count
        logger = None if rundir is None else rundir.logger(total=len(batches), start=done,
                                                           progress=False)
        try:
            return self._run_steps(tasks, batches, done, rundir if resumable else None, logger)
        finally:
            if logger is not None:
                logger.close()

    def _run_steps(self, tasks: list[UnlabeledTask], batches: list[list[int]], done: int,
                   rundir: RunDir | None, logger: Any) -> dict[str, str]:
        """The steps of :meth:`run` from step ``done + 1`` through the one step loop
        (:func:`deciplane.engine.loop.run_steps`: metrics line, then the state after every
        step, then progress), then the final answers. ``status`` says how the steps ended."""
        curve = set(self.checkpoint_steps(len(batches)))
        wall0 = self.budget.wall_time_s       # the sessions before this one (a resumed run)
        t_loop = self.clock()

        def session_s() -> float:
            return self.clock() - t_loop

        with self.budget.clock():
            if self.guard.fired:            # resumed after the guard stopped the run
                self.status = self._guard_status()
            else:
                loop = run_steps(
                    lambda i: self._step(tasks, batches[i], i + 1, curve),
                    start=done, total=len(batches),
                    log=None if logger is None else logger.log,
                    checkpoint=None if rundir is None else (
                        lambda _: self._checkpoint(rundir, session_s())),
                    room=None if self.config.max_wall_time_s is None else (
                        lambda i, step_s: self._room(i, step_s, len(tasks),
                                                     wall0 + session_s())),
                    report=None if not self.progress else (
                        lambda step, metrics: self.progress(step, len(batches), metrics)),
                    clock=self.clock)
                self.status = loop.status
                if loop.status != COMPLETED and not self.guard.fired:
                    log.warning("%s: %s", type(self).__name__, loop.status)
            tokens_before = self.budget.generated_tokens
            final = self.answer(tasks)
            self.final_answer_tokens = self.budget.generated_tokens - tokens_before
        self.records.checkpoints.append((self.budget.optimizer_steps, dict(final)))
        return final

    def _checkpoint(self, rundir: RunDir, session_s: float) -> None:
        """Checkpoint :meth:`run_state` (the last one kept); ``session_s``: wall time of
        the running loop not yet in ``budget.wall_time_s``."""
        state = self.run_state()
        state.method["budget"].wall_time_s += session_s
        rundir.save_state(state, keep_last=1)

    def _step(self, tasks: list[UnlabeledTask], idx: list[int], step: int,
              curve: set[int]) -> StepResult:
        """Step ``step`` (the loop's step): :meth:`adapt_step` on the tasks ``idx``, its
        unlabeled signals, the guard's check (it judges the state after every update, so
        its stop — and rollback — comes with the step), the curve's answers when due."""
        if self.config.guard and self.guard.reference is None:    # the starting state
            self.guard.observe(0, self._probe(tasks), self._trained_copy(), 0)
        tokens0, samples0 = self.budget.generated_tokens, self.budget.samples
        metrics = self.adapt_step([tasks[i] for i in idx], step)
        signals = step_signals(self.budget.generated_tokens - tokens0,
                               self.budget.samples - samples0,
                               [v.answers for v in self.records.votes if v.step == step])
        metrics.update({f"signal/{k}": v for k, v in signals.items() if v is not None})
        stop = False
        if self.config.guard:
            probe = self._probe(tasks)
            stop = self.guard.observe(step, probe, self._trained_copy(),
                                      self.budget.optimizer_steps)
            metrics.update({f"guard/probe_{k}": v for k, v in probe.items() if v is not None})
            metrics["guard/unhealthy_streak"] = float(self.guard.streak)
        metrics["step"] = step
        metrics["optimizer_steps"] = self.budget.optimizer_steps
        self.records.history.append(metrics)
        self.step_count = step
        if stop:
            self._roll_back()
        if step in curve:
            with self.eval_budget.clock():
                self.records.checkpoints.append(
                    (self.budget.optimizer_steps, self.answer(tasks, budget=self.eval_budget)))
        return StepResult(metrics, self._guard_status() if stop else None)

    def _guard_status(self) -> str:
        fired = self.guard.fired
        return (f"stopped by the collapse guard at step {fired['step']} "
                f"({'; '.join(fired['reasons'])})")

    # -- time plan ----------------------------------------------------------------------------
    def _room(self, done: int, step_s: float | None, n_tasks: int, elapsed_s: float
              ) -> str | None:
        """``max_wall_time_s`` before step ``done + 1`` (the loop's ``room``): None to go on,
        or the run's status when that step and the final answers would not fit."""
        limit = self.config.max_wall_time_s
        reserve = self._final_answers_reserve(n_tasks)
        if room_for_iteration(elapsed_s, limit, step_s, reserve):
            return None
        return wall_time_status(limit, done, elapsed_s, step_s, reserve, step="step",
                                final="the final answers")

    def _final_answers_reserve(self, n_tasks: int) -> float:
        """Seconds kept for the final answers, estimated from the guard's probe (greedy
        answers to its first tasks, timed at every probe): the longest probe's seconds per
        task x the tasks x the votes of ``final_answer=majority``. An upper estimate (the
        probe answers a smaller batch); 0 with the guard off, which leaves nothing timed."""
        votes = 1 if self.config.final_answer == "greedy" else self.config.final_votes
        per_task = self._probe_s_max / max(1, min(self.config.guard_probe, n_tasks))
        return per_task * n_tasks * votes

    def _trained_copy(self) -> dict[str, torch.Tensor]:
        """The trained parameters now (what a rollback restores)."""
        return {n: p.detach().clone() for n, p in self.trainable_named_parameters().items()}

    def _probe(self, tasks: Sequence[UnlabeledTask]) -> dict[str, float | None]:
        """The guard's signals of the current policy: greedy answers to the first
        ``guard_probe`` tasks (counted in ``guard_budget``)."""
        cfg = self.config
        probe = list(tasks)[:cfg.guard_probe]
        tokens0 = self.guard_budget.generated_tokens
        t0 = self.clock()
        texts = generate_texts(self.policy, [self.format(t) for t in probe],
                               max_new_tokens=cfg.max_new_tokens, greedy=True,
                               budget=self.guard_budget, prompts_per_batch=cfg.answer_batch)
        self._probe_s_max = max(self._probe_s_max, self.clock() - t0)   # time plan
        answers = self.guard_answers(texts)
        s = step_signals(self.guard_budget.generated_tokens - tokens0, len(probe),
                         [[a] for a in answers] if answers is not None else ())
        return {"mean_tokens": s["mean_tokens"], "extractable": s["extractable"]}

    def guard_answers(self, texts: Sequence[str]) -> list[str | None] | None:
        """The answers the guard's extractable share counts (None: not judged)."""
        return extract(texts)

    def _roll_back(self) -> None:
        """Restore the last parameters whose probe answers were healthy (the guard fired)."""
        fired = self.guard.fired
        log.warning("%s: collapse guard fired at step %d (%s); rolled back to the parameters "
                    "after %d optimizer steps and stopped", type(self).__name__, fired["step"],
                    "; ".join(fired["reasons"]), fired["rolled_back_to_optimizer_steps"])
        with torch.no_grad():
            for n, p in self.trainable_named_parameters().items():
                p.copy_(self.guard.healthy[n])

    # -- helpers for subclasses --------------------------------------------------------------
    def _record_vote(self, step: int, task: UnlabeledTask, answers: Sequence[str | None], v,
                     rewards: Sequence[float]) -> None:
        rec = VoteRecord(step=step, task_id=task.id, majority=v.answer, answers=list(answers),
                         rewards=list(rewards), tie=bool(v.tie), tied=list(v.tied))
        self.records.votes.append(rec)
        if v.answer is None:
            self.records.skipped_prompts += 1
        if v.tie:
            self.records.ties += 1

    def sample_seed(self, step: int) -> int:
        return self.config.seed * 1_000_003 + step

    def sample_task_groups(self, tasks: Sequence[UnlabeledTask], step: int, group_size: int,
                           **kwargs: Any) -> list[list[Trajectory]]:
        """``group_size`` sampled answers per task (a group per task, its id the task's),
        at the config's generation settings and step ``step``'s seed, counted in the
        adaptation budget; ``kwargs`` go to
        :func:`~deciplane.engine.generation.sample_groups` (e.g. ``stop``)."""
        cfg = self.config
        return sample_groups(self.policy, [self.format(t) for t in tasks],
                             group_size=group_size, max_new_tokens=cfg.max_new_tokens,
                             temperature=cfg.temperature, top_p=cfg.top_p,
                             seed=self.sample_seed(step), budget=self.budget,
                             group_ids=[t.id for t in tasks], **kwargs)

    def new_optimizer(self) -> Optimizer:
        """The engine's optimizer over the policy's trainable parameters at the config's
        ``lr``, ``weight_decay`` and ``max_grad_norm``, counting into the adaptation
        budget."""
        cfg = self.config
        return Optimizer(self.policy.trainable_parameters(), lr=cfg.lr,
                         weight_decay=cfg.weight_decay, max_grad_norm=cfg.max_grad_norm,
                         budget=self.budget)


__all__ = ["Adapter", "AdaptConfig", "AdaptRecords", "BaseAdapter", "VoteRecord",
           "extract", "vote", "majority_answers"]
