"""The planner expert of ALFWorld-v0: the plan is kept while the agent follows it, and a
replan after a deviation is bounded in time.

TextWorld's PDDL env replans with fast-downward after every step when asked for
``policy_commands``. From states off the expert's path that can take seconds (pick-two
games: ~10 s per step, measured) or not end at all, and the search runs in C, where no
Python timeout reaches it. So the env asks TextWorld for no plan, keeps the last one while
the agent takes its next command, and replans in a forked child that is killed after
``timeout_s`` (no expert action for that step then). Without ``os.fork`` (Windows) the
replan runs in-process, unbounded.
"""

from __future__ import annotations

import json
import os
import select
import signal
from typing import Any

from deciplane.errors import ConfigError

DEFAULT_TIMEOUT_S = 2.0
"""Replans after a deviation; the first plan of an episode gets :data:`RESET_TIMEOUT_S`."""
RESET_TIMEOUT_S = 60.0
"""Every generated game was solved from its start when it was generated (seconds)."""


def replan(pddl_env: Any) -> list[str]:
    """The planner's plan from the PDDL env's current state (commands; [] if none)."""
    return list(pddl_env._pddl_state.replan(pddl_env._entity_infos) or [])


def replan_bounded(pddl_env: Any, timeout_s: float) -> list[str] | None:
    """:func:`replan` in a forked child killed after ``timeout_s``: the plan, or ``None``
    when the planner did not answer in time."""
    if not hasattr(os, "fork"):
        return replan(pddl_env)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: plan, write, leave without running the parent's exit handlers
        code = 0
        try:
            os.close(read_fd)
            data = json.dumps(replan(pddl_env)).encode()
            with os.fdopen(write_fd, "wb") as out:
                out.write(data)
        except BaseException:  # noqa: BLE001 - the parent sees no answer
            code = 1
        os._exit(code)
    os.close(write_fd)
    chunks: list[bytes] = []
    try:
        while select.select([read_fd], [], [], timeout_s)[0]:
            chunk = os.read(read_fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
        else:  # timed out
            os.kill(pid, signal.SIGKILL)
            chunks = []
    finally:
        os.close(read_fd)
        _, status = os.waitpid(pid, 0)
    if not chunks or os.waitstatus_to_exitcode(status) != 0:
        return None
    return [str(c) for c in json.loads(b"".join(chunks))]


class PlanFollower:
    """The expert's plan through one episode: :meth:`start` at reset, :meth:`after` each
    executed command, :attr:`next_command` the planner's next command (``None`` when it
    found none in time or the game is won). ``timeouts`` counts replans that ran out."""

    def __init__(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        if not timeout_s > 0:
            raise ConfigError(f"expert_timeout_s must be > 0, got {timeout_s}")
        self.timeout_s = float(timeout_s)
        self.plan: list[str] | None = None
        self.timeouts = 0
        self.replans = 0

    @property
    def next_command(self) -> str | None:
        return self.plan[0] if self.plan else None

    def start(self, pddl_env: Any) -> None:
        self.timeouts = self.replans = 0
        self._replan(pddl_env, max(self.timeout_s, RESET_TIMEOUT_S))

    def after(self, pddl_env: Any, command: str, won: bool) -> None:
        """Keep the rest of the plan if ``command`` was its next step, else replan."""
        if won:
            self.plan = []
        elif self.plan and command == self.plan[0]:
            self.plan = self.plan[1:]   # the environment is deterministic: still a plan
        else:
            self._replan(pddl_env, self.timeout_s)

    def _replan(self, pddl_env: Any, timeout_s: float) -> None:
        self.replans += 1
        self.plan = replan_bounded(pddl_env, timeout_s)
        if self.plan is None:
            self.timeouts += 1
