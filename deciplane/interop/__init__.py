"""deciplane environments in other training stacks, and theirs in deciplane.

* :mod:`deciplane.interop.openenv` — serve any registered environment as an OpenEnv
  environment (``deciplane serve ENV_ID``), write the folder ``openenv build`` expects, and
  wrap an OpenEnv environment (served or in-process) as a Gymnasium env
  (:func:`deciplane.envs.from_openenv`).
* :mod:`deciplane.interop.skyrl` — a ``skyrl_gym`` ``BaseTextEnv`` over any deciplane env.
* :mod:`deciplane.interop.trl` — any deciplane env as a TRL ``GRPOTrainer``
  ``environment_factory``, and tool-calling chat templates for the built-in models.

Each needs the optional extra ``pip install 'deciplane[interop]'``; nothing here is
imported by the rest of deciplane.
"""
