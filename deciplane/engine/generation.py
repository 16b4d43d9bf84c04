"""Sampling and generation: the one path from a policy to sampled or greedy responses.

* :func:`generate` — :meth:`Policy.generate` in prompt chunks, counted in a
  :class:`~deciplane.engine.budget.Budget`;
* :func:`generate_texts` — one response text per prompt (greedy by default);
* :func:`sample_groups` — ``group_size`` sampled responses per prompt as single-turn
  :class:`~deciplane.types.Trajectory` records, grouped by prompt (GRPO, TTRL, TTPO);
* :func:`generation_progress` — a context in which every :func:`generate` call reports
  ``(prompts done, prompts)`` after each chunk (long baselines show progress without
  threading a callback through every adapter).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Sequence

from deciplane.engine.budget import Budget, phase
from deciplane.errors import ConfigError
from deciplane.types import Trajectory, Turn


_PROGRESS: ContextVar[Callable[[int, int], None] | None] = ContextVar("generation_progress",
                                                                    default=None)


@contextmanager
def generation_progress(callback: Callable[[int, int], None]) -> Iterator[None]:
    """Within this context, :func:`generate` calls ``callback(done, total)`` (prompts) after
    every chunk of prompts."""
    token = _PROGRESS.set(callback)
    try:
        yield
    finally:
        _PROGRESS.reset(token)


def _count_generation(budget: Budget | None, gens: Sequence) -> None:
    if budget is None:
        return
    budget.samples += len(gens)
    budget.generated_tokens += sum(int(g.response_ids.numel()) for g in gens)
    budget.prefill_tokens += sum(int(g.prompt_ids.numel()) for g in gens)


def generate(policy, prompts: Sequence[str], *, max_new_tokens: int, temperature: float = 1.0,
             do_sample: bool = True, num_return_sequences: int = 1, top_p: float = 1.0,
             seed: int | None = None, budget: Budget | None = None,
             prompts_per_batch: int | None = None, keep_layer: int | None = None,
             stop: Sequence[str] | None = None) -> list:
    """:meth:`Policy.generate` in chunks of ``prompts_per_batch`` prompts (all at once when
    ``None``), counted in ``budget``. Returns the generations in prompt-major order with
    ``prompt_index`` relative to ``prompts``. ``keep_layer``: keep each generation's
    hidden states entering that decoder layer (frozen-trunk caching). ``stop``: extra
    strings that end a response (passed to :meth:`Policy.generate` only when given)."""
    prompts = list(prompts)
    step = prompts_per_batch or max(len(prompts), 1)
    out = []
    for start in range(0, len(prompts), step):
        chunk = prompts[start:start + step]
        with phase(budget, "generate"):
            gens = policy.generate(chunk, max_new_tokens=max_new_tokens,
                                   temperature=temperature if do_sample else 1.0,
                                   do_sample=do_sample, num_return_sequences=num_return_sequences,
                                   top_p=top_p,
                                   seed=None if seed is None else seed + start,
                                   **({"keep_layer": keep_layer} if keep_layer is not None else {}),
                                   **({"stop": list(stop)} if stop else {}))
        for g in gens:
            g.prompt_index += start
        _count_generation(budget, gens)
        out.extend(gens)
        tick = _PROGRESS.get()
        if tick is not None:
            tick(start + len(chunk), len(prompts))
    return out


def generate_texts(policy, prompts: Sequence[str], *, max_new_tokens: int,
                   greedy: bool = True, temperature: float = 1.0, top_p: float = 1.0,
                   seed: int | None = None, budget: Budget | None = None,
                   prompts_per_batch: int | None = 32, stop: Sequence[str] | None = None
                   ) -> list[str]:
    """One response text per prompt (greedy by default), counted in ``budget``."""
    gens = generate(policy, prompts, max_new_tokens=max_new_tokens, temperature=temperature,
                    do_sample=not greedy, top_p=top_p, seed=seed, budget=budget,
                    prompts_per_batch=prompts_per_batch, stop=stop)
    return [g.text for g in gens]


def sample_groups(policy, prompts: Sequence[str], *, group_size: int, max_new_tokens: int,
                  temperature: float = 1.0, top_p: float = 1.0, seed: int | None = None,
                  budget: Budget | None = None, group_ids: Sequence[str] | None = None,
                  prompts_per_batch: int | None = None, keep_layer: int | None = None,
                  stop: Sequence[str] | None = None) -> list[list[Trajectory]]:
    """``group_size`` sampled responses per prompt, as single-turn trajectories.

    ``result[i]`` is the group of ``prompts[i]`` (group id ``group_ids[i]`` or ``"i"``);
    each trajectory has one :class:`~deciplane.types.Turn` with ``observation`` = the
    prompt text, ``action`` = the response text, ``prompt_ids``, ``response_ids`` and
    the sampler's detached ``response_logprobs`` (at ``temperature``); ``reward`` is 0
    until the caller sets it. ``keep_layer`` (:attr:`GRPOUpdate.keep_layer
    <deciplane.engine.grpo.GRPOUpdate.keep_layer>`): each turn also keeps the sampling
    forwards' hidden states entering that layer, so the update runs only the layers above.
    """
    if group_size < 1:
        raise ConfigError(f"group_size must be >= 1, got {group_size}")
    gids = list(group_ids) if group_ids is not None else [str(i) for i in range(len(prompts))]
    if len(gids) != len(prompts):
        raise ConfigError(f"got {len(prompts)} prompts but {len(gids)} group ids; pass one per prompt")
    gens = generate(policy, prompts, max_new_tokens=max_new_tokens, temperature=temperature,
                    do_sample=True, num_return_sequences=group_size, top_p=top_p, seed=seed,
                    budget=budget, prompts_per_batch=prompts_per_batch, keep_layer=keep_layer,
                    stop=stop)
    groups: list[list[Trajectory]] = [[] for _ in prompts]
    for g in gens:
        kept = getattr(g, "boundary_hidden", None)
        turn = Turn(observation=prompts[g.prompt_index], action=g.text, reward=0.0,
                    prompt_ids=g.prompt_ids, response_ids=g.response_ids,
                    response_logprobs=g.response_logprobs, boundary_hidden=kept,
                    boundary_layer=keep_layer if kept is not None else None)
        groups[g.prompt_index].append(Trajectory(turns=[turn], group_id=gids[g.prompt_index]))
    return groups


__all__ = ["generate", "generate_texts", "sample_groups", "generation_progress"]
