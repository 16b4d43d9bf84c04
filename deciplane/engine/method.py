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

Both run their steps through :func:`deciplane.engine.loop.run_steps`, in a run directory
kept by :class:`deciplane.engine.rundir.RunDir`, and checkpoint the same
:class:`deciplane.engine.checkpoint.RunState`. The protocol, method by method:

* **collect** — train: ``rollout`` returns a typed ``RolloutBatch``; adapt: inside
  ``adapt_step`` (on-policy);
* **loss or own update** — train: ``loss`` on micro-batches, or ``update`` where the
  schedule is its own (the GRPO family); adapt: ``adapt_step``, its own update through the
  engine's one optimizer step (:func:`deciplane.engine.optim.optimizer_step`);
* **evaluate** — train: ``evaluate(split)``; adapt: none, the held-out scorer scores the
  answers after the run;
* **own state** — both: :meth:`Method.own_state` / :meth:`Method.load_own_state`.

The trained parameters, the optimizer and the RNG states are saved by the run for every
method; :meth:`own_state` is what a method keeps besides them (TASCO's perturbation RNG,
Probe-ERPO's probes; a plug-in's running statistics) and must be restored exactly for a
resumed run to equal an uninterrupted one.
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

    def own_state(self) -> dict[str, Any]:
        """What this method keeps besides the trained parameters, the optimizer and the
        RNG states (the run saves those), for an exact resume; ``{}`` by default."""
        return {}

    def load_own_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`own_state` (``{}`` from a checkpoint written before the method
        kept any)."""

    def close(self) -> None:
        """Release what the method holds besides the policy (env workers, a sandbox); the
        run calls it when it ends, whatever happened."""


__all__ = ["Method"]
