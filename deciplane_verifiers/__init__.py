"""deciplane's environments as a verifiers 0.4 environment package (taskset id
``deciplane-verifiers``): ``vf-eval deciplane-verifiers --env.taskset.env-id ENV_ID ...``.

verifiers imports the module named after the taskset id and takes the ``Taskset`` and
``Env`` subclasses its ``__all__`` exports; the code is :mod:`deciplane.interop.verifiers`.
"""

from deciplane.interop.verifiers import (DeciplaneConfig, DeciplaneEnv, DeciplaneEnvConfig,
                                         DeciplaneTask, DeciplaneTaskset, load_environment)

__all__ = ["DeciplaneConfig", "DeciplaneEnv", "DeciplaneEnvConfig", "DeciplaneTask",
           "DeciplaneTaskset", "load_environment"]
