"""The one base of every method deciplane runs.

A method is one class plus its config class, named by one
:class:`~deciplane.methods.MethodSpec` in the registry (:mod:`deciplane.methods`:
``target`` is the class, ``config`` its config class, ``kind`` how it runs); a plug-in
adds one through the ``deciplane.methods`` entry-point group. Two families exist:

* ``kind = "train"`` — :class:`~deciplane.trainers.algorithm.Algorithm`, trained on an
  environment suite or a dataset by ``deciplane train``. One step of the loop is one
  iteration: the algorithm collects a typed batch (``rollout``) and the loop's optimizer
  minimises its loss on micro-batches (``loss``, under the normaliser it declares once
  per batch). Where the update truly needs its own schedule it runs it itself with the
  loop's optimizer (``update``): the GRPO family (:mod:`deciplane.engine.grpo`) computes
  old and reference log-probs once per batch, drops degenerate groups and skips the
  optimizer when every group is. ``evaluate`` scores a held-out split.
* ``kind = "adapt"`` — :class:`~deciplane.adapt.base.BaseAdapter`, test-time adaptation on
  unlabeled tasks by ``deciplane adapt``, scored after the run by the held-out scorer.
  One step samples answers to a batch of the tasks from the current policy, turns them
  into pseudo-rewards (votes, consistency) and updates: sampling and update are one step
  because the samples serve that update only (on-policy, nothing is kept to train on
  later) and because the collapse guard judges the state after every update — the state
  a checkpoint saves and a rollback restores.

Both run their steps through :func:`deciplane.engine.loop.run_steps`. This base holds
what both really share, nothing more. Not here, on purpose: ``evaluate`` (an adapter
never sees a scorer: the runner scores its answers) and ``state_dict`` (a trainer's
checkpoint is the loop's — weights, optimizer, the algorithm's modules — while an
adapter saves its own state, :meth:`~deciplane.adapt.base.BaseAdapter.state_dict`).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal


class Method:
    """What every method is: its family, its config class, its config and policy, and
    :meth:`close`."""

    kind: ClassVar[Literal["train", "adapt"]]
    """``train`` or ``adapt`` (the registry's ``MethodSpec.kind`` of its entry)."""
    Config: ClassVar[type]
    """The config class it takes (the registry's ``MethodSpec.config`` names it)."""
    config: Any
    """Its config, an instance of :attr:`Config`."""
    policy: Any
    """The :class:`~deciplane.agents.Policy` it trains or adapts."""

    def close(self) -> None:
        """Release what the method holds besides the policy (env workers, a sandbox); the
        run calls it when it ends, whatever happened."""


__all__ = ["Method"]
