"""Code generation with hidden tests: the ``deciplane/CodeGen-v0`` env, the ``humaneval``
and ``easy-funcs`` benchmarks, and the sandboxed harness that runs candidates.

Modules: :mod:`~deciplane.envs.code.harness` (program extraction, hidden-test runs and
probe runs in the :class:`~deciplane.envs.Sandbox`), :mod:`~deciplane.envs.code.easy_funcs`
(the procedural task family), :mod:`~deciplane.envs.code.benchmarks` (loaders and the
judge, registered in the benchmark table), :mod:`~deciplane.envs.code.env` (the env).
Importing this package imports none of them.
"""
