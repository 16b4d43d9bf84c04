"""deciplane environments in other training stacks, and theirs in deciplane.

* :mod:`deciplane.interop.openenv` — serve any registered environment as an OpenEnv
  environment (``deciplane serve ENV_ID``), write the folder ``openenv build`` expects, and
  wrap an OpenEnv environment (served or in-process) as a Gymnasium env
  (:func:`deciplane.interop.openenv.from_openenv`).
* :mod:`deciplane.interop.skyrl` — a ``skyrl_gym`` ``BaseTextEnv`` over any deciplane env.
* :mod:`deciplane.interop.trl` — any deciplane env as a TRL ``GRPOTrainer``
  ``environment_factory``, and tool-calling chat templates for the built-in models.
* :mod:`deciplane.interop.verifiers` — any deciplane env as a verifiers 0.4 (v1) ``Taskset``
  + ``Env``, loaded by verifiers as the package ``deciplane-verifiers``
  (``deciplane_verifiers``).

The first three need the optional extra ``pip install 'deciplane[interop]'``; verifiers
needs a venv of its own (``make verifiers-env``: it pins ``mcp==2.0.0``, which the extra's
OpenEnv refuses). Nothing here is imported by the rest of deciplane.
"""
