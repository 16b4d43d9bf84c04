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
  (:class:`RunDir`, the one owner of a run's directory: the new-run check, the recorded
  config, checkpoints, metrics log and summary; what a resumed run may change),
  :mod:`~deciplane.engine.checkpoint` (:class:`RunState`, the one checkpoint format),
  :mod:`~deciplane.engine.baselines` (the one baseline store),
  :mod:`~deciplane.engine.compare` (paired comparisons), :mod:`~deciplane.engine.plan`
  (the wall-time plan) and :mod:`~deciplane.engine.logger`.

The engine imports agents, objectives, envs and types; trainers/, adapt/, evaluation/ and
the CLI sit on top of it (``tests/test_layering.py``).
"""

from __future__ import annotations

from deciplane.utils import lazy_exports

_LAZY = {
    "Budget": "deciplane.engine.budget",
    "generate": "deciplane.engine.generation",
    "generate_texts": "deciplane.engine.generation",
    "sample_groups": "deciplane.engine.generation",
    "generation_progress": "deciplane.engine.generation",
    "ResponseForward": "deciplane.engine.logprobs",
    "backward": "deciplane.engine.logprobs",
    "forward_responses": "deciplane.engine.logprobs",
    "pad_responses": "deciplane.engine.logprobs",
    "sequence_logprobs": "deciplane.engine.logprobs",
    "CordRule": "deciplane.engine.optim",
    "MicroLoss": "deciplane.engine.optim",
    "Normaliser": "deciplane.engine.optim",
    "Optimizer": "deciplane.engine.optim",
    "accumulate": "deciplane.engine.optim",
    "combine_gradients": "deciplane.engine.optim",
    "micro_batches": "deciplane.engine.optim",
    "optimizer_step": "deciplane.engine.optim",
    "GRPOConfig": "deciplane.engine.grpo",
    "GRPOUpdate": "deciplane.engine.grpo",
    "StepStats": "deciplane.engine.grpo",
    "trunk_hidden": "deciplane.engine.trunk",
    "top_logits": "deciplane.engine.trunk",
    "first_trainable_layer": "deciplane.engine.trunk",
    "check_trunk_frozen": "deciplane.engine.trunk",
    "decoder_of": "deciplane.engine.trunk",
    "RunDir": "deciplane.engine.rundir",
    "RunState": "deciplane.engine.checkpoint",
    "Method": "deciplane.engine.method",
    "run_steps": "deciplane.engine.loop",
}


__getattr__ = lazy_exports(__name__, _LAZY)


__all__ = list(_LAZY)
