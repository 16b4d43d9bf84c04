"""Evaluation on held-out splits and run reports.

* :mod:`~deciplane.evaluation.evaluate` — ``evaluate_agent``: any agent (menu, text,
  random, expert, plug-in factories) on a registered environment's split, with the
  split's fingerprint; ``EvalReport``;
* :mod:`~deciplane.evaluation.run_eval` — a trained run's checkpoint on its environment
  or benchmark (``deciplane evaluate RUN_DIR``);
* :mod:`~deciplane.evaluation.report` — ``write_report``: PNG curves and ``report.md``
  of a run directory (``deciplane report RUN_DIR``).
"""
