"""Moved in 0.2: one module per algorithm. These names keep importing from here for one
release:

* :class:`MenuPPO`, ``group_advantages``, ``flatten_decisions``, ``pad_menu_log_probs``,
  ``menu_ids`` -> :mod:`deciplane.trainers.rlid_ppo`;
* :class:`TextPPO` -> :mod:`deciplane.trainers.text_ppo`;
* :class:`MathGRPO` -> :mod:`deciplane.trainers.math_grpo`;
* ``ALGORITHMS`` -> :mod:`deciplane.trainers.run`;
* ``DecisionBatch``, ``TextBatch`` -> :mod:`deciplane.trainers.algorithm`;
* ``collect_bc_episodes``, ``run_bc_epochs``, ``text_bc_loss``, ``expert_command_ids``
  -> :mod:`deciplane.trainers.warm_start`;
* ``expert_distill_loss``, ``policy_distill_loss`` -> :mod:`deciplane.objectives.distill`.
"""

from __future__ import annotations

import warnings

from deciplane.objectives.distill import expert_distill_loss, policy_distill_loss
from deciplane.trainers.algorithm import DecisionBatch, TextBatch
from deciplane.trainers.math_grpo import MathGRPO
from deciplane.trainers.rlid_ppo import (MenuPPO, flatten_decisions, group_advantages, menu_ids,
                                         pad_menu_log_probs)
from deciplane.trainers.run import ALGORITHMS
from deciplane.trainers.text_ppo import TextPPO
from deciplane.trainers.warm_start import (collect_bc_episodes, expert_command_ids,
                                           run_bc_epochs, text_bc_loss)

warnings.warn("deciplane.trainers.algorithms is split in deciplane 0.2 (rlid_ppo, text_ppo, "
              "math_grpo, warm_start, run); import from those modules (the old path goes "
              "away in the next release)", DeprecationWarning, stacklevel=2)

__all__ = ["ALGORITHMS", "DecisionBatch", "MathGRPO", "MenuPPO", "TextBatch", "TextPPO",
           "collect_bc_episodes", "expert_command_ids", "expert_distill_loss",
           "flatten_decisions", "group_advantages", "menu_ids", "pad_menu_log_probs",
           "policy_distill_loss", "run_bc_epochs", "text_bc_loss"]
