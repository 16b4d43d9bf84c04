"""Any deciplane environment as a `verifiers <https://pypi.org/project/verifiers/>`_ 0.4
environment (its ``verifiers.v1`` API: a ``Taskset`` plus an ``Env``).

verifiers 0.4 ships only the v1 API: an environment package is an importable module
exporting, in ``__all__``, one ``vf.Taskset`` subclass (the tasks) and optionally one
``vf.Env`` subclass (how a task becomes an episode); ``vf-eval ID`` (or
``vf.load_environment(EnvConfig)``) imports the module named after the taskset id. The
legacy per-package ``load_environment(**kwargs)`` / ``MultiTurnEnv`` form is gone in 0.4.
deciplane's package is the top-level module ``deciplane_verifiers`` (id
``deciplane-verifiers``), which re-exports :class:`DeciplaneTaskset` and
:class:`DeciplaneEnv` from here:

    vf-eval deciplane-verifiers --env.taskset.env-id deciplane/TextWorldExpress-v0 \\
        --env.taskset.env-kwargs '{"game": "twc"}' -n 5 \\
        --client.base-url http://127.0.0.1:8000/v1 -m MODEL --no-push

One task is one game (or problem) of the env: task ``i`` resets it with ``seed=first_task
+ i`` and ``options={"game": ...}`` (``{"index": ...}`` for Math/CodeGen/CodeOpt).
:meth:`DeciplaneEnv.run` steps the deciplane env host-side, as the user of verifiers' own
rollout (``agents.player.interaction``, like verifiers' TextArena and OpenEnv tasksets):
each observation is a user turn (for menu envs with its legal actions numbered,
:func:`deciplane.interop.common.menu_prompt`), each model reply is read as a menu line or
its number (:func:`~deciplane.interop.common.menu_choice`; anything else is the env's
invalid action) or, for a text env, taken as the command. The episode ends when the env
says ``terminated`` or ``truncated``, or after ``max_turns`` steps; the trace's reward
``episode_return`` is the sum of the env's rewards.

**Held-out fields never reach the model**: it sees the observation text and the menu only;
the trace's ``info`` carries the env's info without gold answers, hidden tests or the
expert's fields (:func:`deciplane.interop.common.served_info`). Held-out evaluation stays
deciplane's (``deciplane evaluate``, its scorer process).

The player's harness is verifiers' ``null`` (its tool-less chat program) in the
``subprocess`` runtime: no tools, nothing executed but the chat program. verifiers
prepares that program with ``uv`` (``uv sync --script``: openai, mcp, httpx from PyPI on
first use, cached after).

verifiers pins ``mcp==2.0.0`` and the ``interop`` extra's ``openenv`` needs ``mcp`` 1.x:
install verifiers in its own virtualenv (``make verifiers-env``: ``.venv-verifiers``).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from collections.abc import Iterator
from typing import Any

from pydantic import Field

from deciplane.interop.common import menu_choice, menu_prompt, served_info

try:
    import verifiers.v1 as vf
except ImportError as e:  # pragma: no cover - verifiers lives in its own venv
    raise ImportError(
        "deciplane.interop.verifiers needs verifiers 0.4, which cannot share a venv with "
        "the interop extra (it pins mcp==2.0.0, openenv needs mcp 1.x): `make "
        "verifiers-env` builds .venv-verifiers (deciplane + verifiers==0.4.*)") from e

TASKSET_ID = "deciplane-verifiers"
"""The taskset id verifiers resolves to the module ``deciplane_verifiers``."""

INDEX_ENVS = ("deciplane/Math-v0", "deciplane/CodeGen-v0", "deciplane/CodeOpt-v0")
"""Envs whose reset picks a problem with ``options={"index": i}`` (the others: ``game``)."""

SYSTEM_PROMPT = {
    "menu": ("You are playing a text game. Each turn shows what you observe and the legal "
             "actions, numbered. Reply with exactly one action, as written or by its "
             "number, and nothing else."),
    "text": "Solve the task. Reply with your answer only.",
}


class DeciplaneConfig(vf.TasksetConfig):
    """The taskset's knobs (``--env.taskset.*``)."""

    env_id: str = "deciplane/TextWorldExpress-v0"
    """A registered deciplane environment id (``deciplane envs`` lists them)."""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments for ``deciplane.envs.make`` (``game``, ``game_params``,
    ``split``, ...)."""
    num_tasks: int = Field(10, ge=1)
    """How many tasks (games or problems): ``first_task`` .. ``first_task + num_tasks - 1``."""
    first_task: int = Field(0, ge=0)
    reset_option: str | None = None
    """The reset option that picks the task (None: ``index`` for Math/CodeGen/CodeOpt,
    ``game`` otherwise)."""
    max_turns: int = Field(50, ge=1)
    """Env steps per episode at most (the env's own ``truncated`` may come first)."""
    labels: str = "numbers"
    """How menu lines are labelled in the prompt: ``numbers`` (1, 2, ...) or ``letters``."""


class DeciplaneData(vf.TaskData):
    env_id: str
    env_kwargs: dict[str, Any]
    seed: int
    options: dict[str, Any]
    max_turns: int
    labels: str


class DeciplaneTask(vf.Task[DeciplaneData]):
    """One game or problem; scored by :meth:`DeciplaneEnv.run` (``episode_return``)."""


class DeciplaneTaskset(vf.Taskset[DeciplaneTask, DeciplaneConfig]):
    """``num_tasks`` tasks of ``env_id``; nothing is built until an episode runs."""

    def load(self) -> Iterator[DeciplaneTask]:
        import deciplane.envs as envs

        c = self.config
        if c.env_id not in envs.registry():
            raise ValueError(f"{c.env_id!r} is not a registered deciplane environment; "
                             "`deciplane envs` lists them")
        if c.labels not in ("numbers", "letters"):
            raise ValueError(f"labels must be 'numbers' or 'letters', not {c.labels!r}")
        key = c.reset_option or ("index" if c.env_id in INDEX_ENVS else "game")
        kind = "text" if c.env_id in INDEX_ENVS else "menu"
        for i in range(c.first_task, c.first_task + c.num_tasks):
            yield DeciplaneTask(
                DeciplaneData(
                    name=f"{c.env_id}#{i}", prompt=None, system_prompt=SYSTEM_PROMPT[kind],
                    env_id=c.env_id, env_kwargs=dict(c.env_kwargs), seed=i,
                    options={key: i}, max_turns=c.max_turns, labels=c.labels),
                c.task)


class DeciplaneEnvConfig(vf.EnvConfig):
    """One seat, ``player``: verifiers' tool-less ``null`` chat harness, run locally."""

    player: vf.AgentConfig = vf.AgentConfig(harness={"id": "null"},
                                            runtime=vf.SubprocessConfig())


class DeciplaneEnv(vf.Env[DeciplaneEnvConfig]):
    """The deciplane env plays the user: observation in, reply out, until the episode ends."""

    async def start(self) -> None:
        """verifiers prepares its chat program with the ``uv`` on PATH (else it installs
        one with pip): use the one installed beside this interpreter (``make
        verifiers-env`` puts it there), even when the venv is not activated."""
        bindir = os.path.dirname(sys.executable)
        if shutil.which("uv") is None and os.path.exists(os.path.join(bindir, "uv")):
            os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")

    async def run(self, task: DeciplaneTask, agents: Any) -> None:
        import deciplane.envs as envs

        data = task.data
        env = await asyncio.to_thread(envs.make, data.env_id, **data.env_kwargs)
        split = data.env_kwargs.get("split", getattr(env.unwrapped, "split", None))
        total, steps, invalid = 0.0, 0, 0
        terminated = truncated = capped = False
        info: dict[str, Any] = {}
        try:
            obs, info = await asyncio.to_thread(env.reset, seed=data.seed,
                                                options=dict(data.options))
            async with agents.player.interaction(task) as interaction:
                segment = await interaction.turn(_prompt(obs, info, data.labels))
                while not segment.terminated:
                    action = _action(segment.last_reply, info.get("menu"), data.labels)
                    obs, reward, terminated, truncated, info = await asyncio.to_thread(
                        env.step, action)
                    total += float(reward)
                    steps += 1
                    invalid += bool(info.get("invalid_action"))
                    if terminated or truncated:
                        break
                    if steps >= data.max_turns:
                        capped = True
                        interaction.trace.stop("max_turns")
                        break
                    segment = await interaction.turn(_prompt(obs, info, data.labels))
        finally:
            await asyncio.to_thread(env.close)
        trace = interaction.trace
        trace.record_reward("episode_return", total)
        trace.record_metrics({"env_steps": steps, "invalid_actions": invalid,
                              "terminated": float(bool(terminated)),
                              "truncated": float(bool(truncated) or capped)})
        trace.info["deciplane"] = served_info(info, split, expose_expert=False)


def _prompt(obs: Any, info: dict[str, Any], labels: str) -> str:
    return menu_prompt(str(obs), info.get("menu"), labels=labels)


def _action(reply: str, menu: Any, labels: str) -> Any:
    """The env action for a reply: a menu index (the whole reply, else its last line, as a
    menu line or label; ``len(menu)``, the invalid action, otherwise) or the text."""
    if menu is None:
        return reply
    choice = menu_choice(reply, menu, labels)
    lines = [line for line in reply.strip().splitlines() if line.strip()]
    if choice == len(menu) and len(lines) > 1:
        choice = menu_choice(lines[-1], menu, labels)
    return choice


def environment_config(env_id: str = "deciplane/TextWorldExpress-v0", num_examples: int = 10,
                       *, max_turns: int = 50, first_task: int = 0,
                       **env_kwargs: Any) -> DeciplaneEnvConfig:
    """The ``vf.EnvConfig`` for ``num_examples`` tasks of ``env_id`` (``env_kwargs`` go to
    ``deciplane.envs.make``)."""
    return DeciplaneEnvConfig(taskset={
        "id": TASKSET_ID, "env_id": env_id, "env_kwargs": env_kwargs,
        "num_tasks": int(num_examples), "first_task": int(first_task),
        "max_turns": int(max_turns)})


def load_environment(env_id: str = "deciplane/TextWorldExpress-v0", num_examples: int = 10,
                     *, max_turns: int = 50, first_task: int = 0,
                     **env_kwargs: Any) -> DeciplaneEnv:
    """A verifiers environment playing ``env_id``, built by verifiers' own loader
    (``vf.load_environment``, which imports the ``deciplane-verifiers`` package)."""
    env = vf.load_environment(environment_config(env_id, num_examples, max_turns=max_turns,
                                                 first_task=first_task, **env_kwargs))
    assert isinstance(env, DeciplaneEnv), type(env)
    return env


__all__ = ["DeciplaneConfig", "DeciplaneData", "DeciplaneEnv", "DeciplaneEnvConfig",
           "DeciplaneTask", "DeciplaneTaskset", "TASKSET_ID", "environment_config",
           "load_environment"]
