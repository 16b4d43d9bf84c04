"""Teacher-forced response log-probs: the one function that scores given responses.

:func:`forward_responses` runs one batched forward over ``prompt + response`` (left
padded; the computation is :func:`deciplane.agents.policy.score_responses`, the one
teacher-forced forward, which ``Policy.sequence_logprobs`` also uses) and returns per-token log-probs ``(B, R)`` with the responses *right-aligned*
and a mask true on real response tokens; on request the per-token entropies and the
full-vocabulary log-softmax (distillation). Logits are divided by the sampling
temperature, and only the last ``max R + 1`` positions get logits. Every forward is
counted in the :class:`~deciplane.engine.budget.Budget` it is given.

:func:`sequence_logprobs` is the same forward returning one ``(R_i,)`` tensor per
response (what ``Policy.sequence_logprobs`` returned in 0.1). :func:`backward` is
``loss.backward()`` counted as backpropagated tokens.
"""

from __future__ import annotations

from typing import Sequence

import torch

from deciplane.agents.policy import ResponseForward, score_responses, unpad_left
from deciplane.engine.budget import Budget, phase
from deciplane.errors import ConfigError


def pad_responses(values: Sequence[torch.Tensor], width: int | None = None,
                  fill: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-align 1-D per-response tensors into ``(B, R)`` plus the bool mask."""
    width = width if width is not None else max((int(v.numel()) for v in values), default=0)
    out = torch.full((len(values), width), fill, dtype=torch.float32)
    mask = torch.zeros((len(values), width), dtype=torch.bool)
    for i, v in enumerate(values):
        n = int(v.numel())
        if n:
            out[i, width - n:] = v.float()
            mask[i, width - n:] = True
    return out, mask


def forward_responses(policy, prompt_ids: Sequence[torch.Tensor],
                      response_ids: Sequence[torch.Tensor], *, temperature: float = 1.0,
                      with_entropy: bool = False, full: bool = False, grad: bool | None = True,
                      model: torch.nn.Module | None = None, budget: Budget | None = None,
                      trunk=None) -> ResponseForward:
    """Log-probs of ``response_ids[i]`` given ``prompt_ids[i]`` in one batched forward
    (:func:`deciplane.agents.policy.score_responses`), counted in ``budget``.

    ``grad=False`` runs under ``torch.no_grad()``, ``grad=None`` in the caller's grad mode;
    ``model`` overrides ``policy.model`` (e.g. ``policy.reference()``'s module);
    ``full=True`` also returns the log-softmax over the vocabulary. ``trunk``: a
    :class:`deciplane.engine.trunk.TrunkStates` — only the layers above its boundary run,
    from hidden states it computed once for these sequences (exact, see
    :mod:`deciplane.engine.trunk`).
    """
    fwd = score_responses(policy, prompt_ids, response_ids, temperature=temperature,
                          with_entropy=with_entropy, full=full, grad=grad, model=model,
                          forward=trunk)
    if budget is not None:
        budget.forward_tokens += fwd.n_tokens
        budget.forward_passes += 1
    return fwd


def backward(loss: torch.Tensor, fwd: ResponseForward, budget: Budget | None = None) -> None:
    """``loss.backward()``, counting the forward's tokens as backpropagated."""
    with phase(budget, "backward"):
        loss.backward()
    if budget is not None:
        budget.backward_tokens += fwd.n_tokens
        budget.backward_passes += 1


def sequence_logprobs(policy, prompt_ids: Sequence[torch.Tensor],
                      response_ids: Sequence[torch.Tensor], *, temperature: float = 1.0,
                      with_entropy: bool = False, model: torch.nn.Module | None = None,
                      grad: bool | None = None, budget: Budget | None = None):
    """Per-token log-probs ``(R_i,)`` of each response given its prompt (in the
    caller's grad mode by default): :func:`forward_responses` unpadded into a list; with ``with_entropy=True``
    ``(logprobs, entropies)``."""
    if len(prompt_ids) != len(response_ids):
        raise ConfigError(f"got {len(prompt_ids)} prompts but {len(response_ids)} responses; "
                          "pass one each")
    if not prompt_ids:
        return ([], []) if with_entropy else []
    fwd = forward_responses(policy, prompt_ids, response_ids, temperature=temperature,
                            with_entropy=with_entropy, grad=grad, model=model, budget=budget)
    lengths = [int(r.numel()) for r in response_ids]
    logps = unpad_left(fwd.logp, lengths)
    return (logps, unpad_left(fwd.entropy, lengths)) if with_entropy else logps


__all__ = ["ResponseForward", "backward", "forward_responses", "pad_responses",
           "sequence_logprobs"]
