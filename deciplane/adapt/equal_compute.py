"""The equal-compute selection baselines of ``deciplane adapt``: majority vote and best-of-N
by mean token log-prob, from the same samples of the unadapted policy (no gold).

An adapter whose budget is counted in forward-token equivalents
(:func:`deciplane.engine.budget.forward_token_equivalents`; TASCO) is compared with these at
the compute it spent; the runner (:mod:`deciplane.adapt.runner`) picks the number of votes.
They live in ``adapt/`` rather than in the method's module because the runner, below the
methods, needs them.
"""

from __future__ import annotations

import math
from typing import Sequence

from deciplane.adapt.base import extract, vote
from deciplane.engine.budget import Budget
from deciplane.engine.generation import generate


def best_of_n_index(mean_logprobs: Sequence[float], answers: Sequence[str | None]) -> int | None:
    """Index of the sample with the highest mean token log-prob among those with an
    answer (first on ties); ``None`` when no sample has one."""
    best = None
    for i, (lp, a) in enumerate(zip(mean_logprobs, answers)):
        if a is None or a == "":
            continue
        if best is None or lp > mean_logprobs[best]:
            best = i
    return best


def equal_compute_baselines(policy, prompts: Sequence[str], *, votes: int, max_new_tokens: int,
                            temperature: float, top_p: float, seed: int, budget: Budget,
                            prompts_per_batch: int = 8) -> dict[str, list]:
    """``votes`` samples per prompt from ``policy`` (no adaptation) and two answers from
    the same samples: the majority vote and best-of-N by mean token log-prob (no gold).
    Returns ``{"majority": [...], "best_of_n": [...], "samples": [[answer, ...], ...]}``
    ("" where no sample has an answer)."""
    gens = generate(policy, prompts, max_new_tokens=max_new_tokens, temperature=temperature,
                    do_sample=True, num_return_sequences=votes, top_p=top_p, seed=seed,
                    budget=budget, prompts_per_batch=prompts_per_batch)
    per: list[list[str | None]] = [[] for _ in prompts]
    lps: list[list[float]] = [[] for _ in prompts]
    for g, a in zip(gens, extract([g.text for g in gens])):
        per[g.prompt_index].append(a)
        n = int(g.response_logprobs.numel())
        lps[g.prompt_index].append(float(g.response_logprobs.sum()) / n if n else -math.inf)
    bon = []
    for answers, lp in zip(per, lps):
        i = best_of_n_index(lp, answers)
        bon.append("" if i is None else answers[i])
    return {"majority": [vote(a).answer or "" for a in per], "best_of_n": bon, "samples": per}


__all__ = ["best_of_n_index", "equal_compute_baselines"]
