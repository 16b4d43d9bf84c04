"""Exception hierarchy. Every message says what was wrong and what to do next."""

from __future__ import annotations


class DeciplaneError(Exception):
    """Base class of every error raised by deciplane."""


class ConfigError(DeciplaneError, ValueError):
    """A configuration value is not allowed; the message lists the allowed values."""


class UnknownEnvironment(DeciplaneError, KeyError):
    """An environment id that is not registered."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


class UnknownPreset(DeciplaneError, ValueError):
    """A game preset or benchmark name that does not exist."""


class UnknownBenchmark(DeciplaneError, ValueError):
    """A benchmark name that does not exist."""


class GameError(DeciplaneError, RuntimeError):
    """A game file is missing, corrupt or cannot be loaded/generated."""


class EmptyMenu(DeciplaneError, RuntimeError):
    """The environment offered no legal action in a non-terminal state."""


class JavaUnavailable(DeciplaneError, RuntimeError):
    """No usable Java runtime (TextWorld-Express runs in a JVM); the message says how to install one."""


class InvalidAction(DeciplaneError, ValueError):
    """An action outside the action space (e.g. an index >= max_menu)."""


class InvalidAnswer(InvalidAction):
    """An answer that cannot be scored (e.g. not text, not UTF-8). An
    :class:`InvalidAction`: a math environment's action is its answer."""


class MenuTooLarge(DeciplaneError, ValueError):
    """A menu has more actions than there are single-token labels."""


class ModelNotFound(DeciplaneError, FileNotFoundError):
    """A model that is neither built in, a local folder, a GGUF file, nor in the HF cache."""


class ScorerError(DeciplaneError, RuntimeError):
    """The held-out scorer refused a request (unknown task ids, dead scorer process...)."""


class SandboxError(DeciplaneError, RuntimeError):
    """The sandbox itself failed (not the program inside it)."""


class WarmJailBroken(SandboxError):
    """A warm-jail run whose jail broke mid-run (a program killed or stopped the in-jail
    supervisor) after descriptors were handed to it: the run cannot be replayed, since
    the peer on those descriptors saw part of it. Re-run with fresh descriptors."""


class BackendUnavailable(SandboxError):
    """A sandbox backend cannot run on this machine; the message says why and how to fix it."""


class CheckpointError(DeciplaneError, RuntimeError):
    """A checkpoint is missing, corrupt, or does not match the run's config."""


class ObjectiveInputError(DeciplaneError, ValueError):
    """A loss/advantage function got tensors of the wrong shape, dtype or content."""


class MissingTurnIds(ObjectiveInputError):
    """A turn-level objective (TLM-DRE) was called without the token-to-turn tensor."""


class TaskError(DeciplaneError, ValueError):
    """A CodeOpt task that is unknown or cannot be loaded; the message says how to fix it."""


class EnvWorkerError(DeciplaneError, RuntimeError):
    """A remote environment worker (Ray actor) failed beyond its retries, or never started."""
