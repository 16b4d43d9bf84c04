"""The one training engine under the trainers and the test-time adapters.

* :mod:`~deciplane.engine.budget` — :class:`Budget`: what a run spent (samples, tokens,
  forward/backward passes, optimizer steps taken and skipped, seconds per phase);
* :mod:`~deciplane.engine.generation` — sampling: :func:`generate`,
  :func:`generate_texts`, :func:`sample_groups`;
* :mod:`~deciplane.engine.logprobs` — teacher-forced response log-probs:
  :func:`forward_responses` (one batched forward, ``(B, R)`` right-aligned),
  :func:`sequence_logprobs`, :func:`backward`;
* :mod:`~deciplane.engine.optim` — THE optimizer step: :class:`Optimizer` (AdamW,
  per-group clipping, skip-step), :func:`optimizer_step` / :func:`accumulate`
  (micro-batches under the :class:`Normaliser` each objective declares once, the CORD
  gradient buffers over the whole optimizer batch);
* :mod:`~deciplane.engine.distributed` — data-parallel steps under ``accelerate launch`` /
  ``torchrun``: each rank its slice of the optimizer batch, gradients summed over ranks;
* :mod:`~deciplane.engine.grpo` — :class:`GRPOConfig` + :class:`GRPOUpdate`, the
  GRPO-family step on groups of single-turn samples (Math-v0 GRPO, TTRL);
* :mod:`~deciplane.engine.episodes` — the one episode loop over ``gymnasium.vector``
  envs (training rollouts and evaluation);
* :mod:`~deciplane.engine.trunk` — frozen-trunk caching: the frozen bottom layers run
  once without a graph (:func:`trunk_hidden`), only the trainable top is re-run
  (:func:`top_logits`);
* :mod:`~deciplane.engine.loop` — :func:`run_steps`, the one step loop of every method
  (trainers' iterations, adapters' steps): time plan, step, metrics line, checkpoint;
  :mod:`~deciplane.engine.method` — :class:`Method`, the base of every method (the
  trainers' ``Algorithm``, the adapters' ``BaseAdapter``);
* the run's services, shared by trainers and adapters: :mod:`~deciplane.engine.rundir`
  (a new run's directory, what a resumed run may change), :mod:`~deciplane.engine.baselines`
  (the one baseline store), :mod:`~deciplane.engine.compare` (paired comparisons),
  :mod:`~deciplane.engine.plan` (the wall-time plan), with
  :mod:`~deciplane.engine.checkpoint` and :mod:`~deciplane.engine.logger`.

The engine imports agents, objectives, envs and types; trainers/, adapt/, evaluation/ and
the CLI sit on top of it (``tests/test_layering.py``).
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "Budget": "budget",
    "generate": "generation", "generate_texts": "generation", "sample_groups": "generation",
    "generation_progress": "generation",
    "ResponseForward": "logprobs", "backward": "logprobs", "forward_responses": "logprobs",
    "pad_responses": "logprobs", "sequence_logprobs": "logprobs",
    "CordRule": "optim", "MicroLoss": "optim", "Normaliser": "optim", "Optimizer": "optim",
    "accumulate": "optim", "combine_gradients": "optim", "micro_batches": "optim",
    "optimizer_step": "optim",
    "GRPOConfig": "grpo", "GRPOUpdate": "grpo", "StepStats": "grpo",
    "trunk_hidden": "trunk", "top_logits": "trunk", "first_trainable_layer": "trunk",
    "check_trunk_frozen": "trunk", "decoder_of": "trunk",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"deciplane.engine.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'deciplane.engine' has no attribute {name!r}")


__all__ = list(_LAZY)
