"""deciplane: train and adapt LLM agents.

``import deciplane`` registers the environments under the ``deciplane/`` namespace.
"""

from deciplane import _moved

_moved.install()  # old module paths of 0.1 keep importing, with a DeprecationWarning

from deciplane import envs as envs  # noqa: E402,F401  (registers environments)
from deciplane.errors import DeciplaneError  # noqa: E402
from deciplane.types import Decision, Menu, Trajectory, Turn, UnlabeledTask  # noqa: E402

__version__ = "0.2.0"

__all__ = ["Menu", "Decision", "Turn", "Trajectory", "UnlabeledTask",
           "DeciplaneError", "envs", "__version__"]


__getattr__ = _moved.renamed_names(__name__)   # GroupBatch
