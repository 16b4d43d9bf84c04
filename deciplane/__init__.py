"""deciplane: train and adapt LLM agents.

``import deciplane`` registers the environments under the ``deciplane/`` namespace.
"""

from deciplane import envs as envs  # noqa: F401  (registers environments)
from deciplane.errors import DeciplaneError
from deciplane.types import Decision, GroupBatch, Menu, Trajectory, Turn, UnlabeledTask

__version__ = "0.1.0"

__all__ = ["Menu", "Decision", "Turn", "Trajectory", "GroupBatch", "UnlabeledTask",
           "DeciplaneError", "envs", "__version__"]
