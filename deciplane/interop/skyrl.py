"""Any deciplane environment as a `skyrl-gym <https://pypi.org/project/skyrl-gym/>`_ text env.

SkyRL's generator talks to a ``skyrl_gym`` ``BaseTextEnv``: ``init(prompt)`` returns the
chat so far, ``step(llm_reply)`` the messages to append, a reward and ``done``. Here the
deciplane env's observation becomes a user message; for menu envs the legal actions are
listed, numbered, and the reply is read as a menu line (case- and space-insensitively) or
its number; anything else is the env's invalid action. Text envs (Math, CodeGen) take the
reply as is. ``info`` reaches ``metadata`` without held-out fields
(:func:`deciplane.interop.common.served_info`: no gold answers, hidden tests, and the
expert only on the train split).

    from deciplane.interop.skyrl import register
    import skyrl_gym
    register()                      # id "deciplane"
    env = skyrl_gym.make("deciplane", env_config={"env_id": "deciplane/Math-v0"},
                         extras={"seed": 0})
"""

from __future__ import annotations

from typing import Any

from deciplane.interop.common import menu_choice, menu_prompt, served_info

try:
    from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
except ImportError as e:  # pragma: no cover - the extra is not installed
    raise ImportError("deciplane.interop.skyrl needs skyrl-gym: "
                      "pip install 'deciplane[interop]'") from e


class DeciplaneTextEnv(BaseTextEnv):
    """``env_config``: ``env_id`` (a registered deciplane id) and ``env_kwargs`` (for
    ``gym.make``); ``extras``: ``seed`` and ``options`` for the reset, ``max_turns``
    (default: the env's own episode end)."""

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None) -> None:
        from deciplane.envs import make

        super().__init__()
        cfg = dict(env_config or {})
        extras = dict(extras or {})
        if "env_id" not in cfg:
            raise ValueError("env_config needs env_id (a deciplane environment id)")
        self.env_id = str(cfg["env_id"])
        self.env = make(self.env_id, **dict(cfg.get("env_kwargs") or {}))
        self.max_turns = int(extras.get("max_turns", cfg.get("max_turns", 10**9)))
        self.seed, self.options = extras.get("seed"), extras.get("options")
        self.split = (cfg.get("env_kwargs") or {}).get("split",
                                                      getattr(self.env.unwrapped, "split", None))
        self.menu: Any = None
        self.episode_return = 0.0

    def init(self, prompt: Any) -> tuple[list[dict[str, str]], dict[str, Any]]:
        obs, info = self.env.reset(seed=self.seed, options=self.options)
        self.menu = info.get("menu")
        self.turns, self.episode_return = 0, 0.0
        chat = list(prompt or []) + [{"role": "user", "content": menu_prompt(obs, self.menu)}]
        return chat, served_info(info, self.split, expose_expert=False)

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        act: Any = action if self.menu is None else menu_choice(action, self.menu)
        obs, reward, term, trunc, info = self.env.step(act)
        self.menu = info.get("menu")
        self.episode_return += float(reward)
        done = bool(term or trunc) or self.turns >= self.max_turns
        meta = served_info(info, self.split, expose_expert=False)
        return BaseTextEnvStepOutput(
            observations=[] if done else [{"role": "user",
                                           "content": menu_prompt(obs, self.menu)}],
            reward=float(reward), done=done, metadata=meta, postprocessed_action=None)

    def get_metrics(self) -> dict[str, Any]:
        return {"turns": self.turns, "return": self.episode_return}

    def close(self) -> None:
        self.env.close()


def register(id: str = "deciplane") -> str:
    """Register :class:`DeciplaneTextEnv` with skyrl-gym under ``id`` (once)."""
    import skyrl_gym

    if id not in skyrl_gym.registry:
        skyrl_gym.register(id=id, entry_point="deciplane.interop.skyrl:DeciplaneTextEnv")
    return id


__all__ = ["DeciplaneTextEnv", "menu_choice", "menu_prompt", "register"]
