"""Rollout collection, the training loop, checkpoints, logging and reports.

```python
from deciplane.trainers import load_config, run_training
summary = run_training(load_config("configs/quickstart.yaml", ["iterations=4"]),
                       run_dir="runs/demo")          # or: deciplane train CONFIG --run-dir DIR
summary["eval"]["test"]["success_rate"]
```

* :mod:`~deciplane.trainers.config` — the config sections every training method shares
  (:class:`TrainConfig`, model, env, optimizer, evaluation, warm start, ...), YAML +
  ``--set key=value`` overrides;
* :mod:`~deciplane.trainers.algorithm` — the :class:`Algorithm` interface and the typed
  batches; :mod:`~deciplane.trainers.trainer` — :class:`Trainer`, the loop (rollouts,
  epochs, minibatches on the engine's optimizer step, checkpoints, summary);
* the training methods are modules of :mod:`deciplane.methods`, each with its config class
  (:mod:`~deciplane.methods.rlid_ppo`: RLiD-PPO + CORD, :mod:`~deciplane.methods.text_ppo`:
  free-text PPO / TLM-DRE, :mod:`~deciplane.methods.math_grpo`: single-turn GRPO on
  Math-v0); what several of them share stays here: :mod:`~deciplane.trainers.warm_start`
  (behaviour cloning), :mod:`~deciplane.trainers.critic` (the value head of
  ``advantage: gae``);
* :mod:`~deciplane.trainers.run` — :func:`run_training` and the algorithms' table (a view
  of the registry);
* :mod:`~deciplane.trainers.rollout`, :mod:`~deciplane.trainers.env_suite` — grouped episodes
  over ``gymnasium.vector`` envs; :mod:`~deciplane.engine.checkpoint`,
  :mod:`~deciplane.engine.logger`, :mod:`~deciplane.evaluation.report`.

Heavy modules load lazily: importing this package costs nothing until a name is used.
"""

from __future__ import annotations

from deciplane._moved import renamed_names
from deciplane.utils import lazy_exports

_LAZY = {
    "load_config": "deciplane.trainers.config",
    "run_training": "deciplane.trainers.run",
    "build_policy": "deciplane.trainers.run",
    "build_algorithm": "deciplane.trainers.run",
    "ALGORITHMS": "deciplane.trainers.run",
    "Trainer": "deciplane.trainers.trainer",
    "Algorithm": "deciplane.trainers.algorithm",
    "RolloutBatch": "deciplane.trainers.algorithm",
}


# the lazy names and the old ones (deciplane._moved.RENAMED)
__getattr__ = renamed_names(__name__, lazy_exports(__name__, _LAZY))


__all__ = list(_LAZY)
