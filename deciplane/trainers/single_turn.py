"""Moved in 0.2: the single-turn core is :mod:`deciplane.engine` (shared by the trainers
and the test-time adapters). These names keep importing from here for one release:

=========================  ===============================================
0.1 (this module)          0.2
=========================  ===============================================
``Budget``                 :class:`deciplane.engine.budget.Budget`
``generate``               :func:`deciplane.engine.generation.generate`
``generate_texts``         :func:`deciplane.engine.generation.generate_texts`
``sample_groups``          :func:`deciplane.engine.generation.sample_groups`
``ResponseForward``        :class:`deciplane.engine.logprobs.ResponseForward`
``forward_responses``      :func:`deciplane.engine.logprobs.forward_responses`
``pad_responses``          :func:`deciplane.engine.logprobs.pad_responses`
``backward``               :func:`deciplane.engine.logprobs.backward`
``Optimizer``              :class:`deciplane.engine.optim.Optimizer`
``micro_batches``          :func:`deciplane.engine.optim.micro_batches`
``GRPOConfig``             :class:`deciplane.engine.grpo.GRPOConfig`
``GRPOUpdate``             :class:`deciplane.engine.grpo.GRPOUpdate`
``StepStats``              :class:`deciplane.engine.grpo.StepStats`
``aggregation_share``      :func:`deciplane.objectives.policy_loss.aggregation_share`
=========================  ===============================================
"""

from __future__ import annotations

import warnings

from deciplane.engine.budget import Budget
from deciplane.engine.generation import generate, generate_texts, sample_groups
from deciplane.engine.grpo import GRPOConfig, GRPOUpdate, StepStats, validate_grpo
from deciplane.engine.logprobs import ResponseForward, backward, forward_responses, pad_responses
from deciplane.engine.optim import Optimizer as _EngineOptimizer
from deciplane.engine.optim import micro_batches
from deciplane.objectives.policy_loss import aggregation_share

warnings.warn("deciplane.trainers.single_turn moved to deciplane.engine in deciplane 0.2; "
              "import from deciplane.engine instead (the old path goes away in the next "
              "release)", DeprecationWarning, stacklevel=2)



class Optimizer(_EngineOptimizer):
    """0.1's single-group optimizer: :meth:`step` returns the pre-clip norm as a float
    (:class:`deciplane.engine.optim.Optimizer` returns the per-group norms)."""

    def step(self) -> float:  # type: ignore[override]
        return super().step()["optim/grad_norm"]


__all__ = ["Budget", "GRPOConfig", "GRPOUpdate", "Optimizer", "ResponseForward", "StepStats",
           "aggregation_share", "backward", "forward_responses", "generate", "generate_texts",
           "micro_batches", "pad_responses", "sample_groups", "validate_grpo"]
