"""deciplane environments as OpenEnv environments, and OpenEnv environments as Gymnasium envs.

`OpenEnv <https://github.com/meta-pytorch/OpenEnv>`_ (package ``openenv`` 0.10) serves an
environment over HTTP and WebSocket with typed pydantic actions and observations; TRL,
SkyRL and verifiers each ship a client for it, so one server reaches all three.

**Export** (:func:`environment_class`, :func:`create_app`, :func:`serve`,
:func:`write_openenv_folder`; the command ``deciplane serve ENV_ID``): any registered
environment, built-in or plug-in. The observation carries the env's text, and for menu
envs the legal actions (``menu``) and their mask; the action is a menu ``index`` or a
``command`` (a menu line for menu envs, the answer or program for text envs). Each
WebSocket connection gets its own environment; sessions are bounded
(``max_sessions``) and an idle one is closed after ``session_timeout_s`` (a client that
died mid-episode frees its slot).

**What is never served**: the held-out rule of the scorer process holds for the server
too. ``info`` keys that can carry answers (:data:`WITHHELD_INFO`: gold answers, hidden
tests, reference solutions) are dropped from every response, and the expert's fields
(``expert_action``, ``expert_command``) are served only on the ``train`` split and only
with ``expose_expert=True``. The metadata (``GET /metadata``) says so.

**Import** (:class:`OpenEnvGymEnv`, :func:`from_openenv`): an OpenEnv
environment reached by URL (a running server) or an ``Environment`` class / instance in
process, as a Gymnasium env with deciplane's contract — text observations; a menu
(``info["menu"]``, ``Discrete`` actions) when the observation lists legal actions, free
text otherwise.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

import gymnasium as gym

from deciplane.errors import ConfigError
from deciplane.interop.common import WITHHELD_INFO, jsonable, served_info

try:
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import (Action, ConcurrencyConfig, EnvironmentMetadata,
                                               Observation, State)
    from pydantic import Field
except ImportError as e:  # pragma: no cover - the extra is not installed
    raise ImportError("deciplane.interop.openenv needs OpenEnv: "
                      "pip install 'deciplane[interop]' (openenv 0.10)") from e

DEFAULT_SESSION_TIMEOUT_S = 600.0
"""Idle seconds before a session's environment is closed (a sandboxed CodeGen test run
takes seconds; a client that went away must not hold its slot for ever)."""


# ---- wire types ------------------------------------------------------------------------------

class DeciplaneAction(Action):
    """One step: a menu ``index``, or a ``command`` (the menu line's text for menu envs; the
    answer or program for text envs). Give exactly one."""

    index: Optional[int] = Field(default=None, description="index into the observation's menu")
    command: Optional[str] = Field(default=None,
                                   description="a menu line (menu envs) or the text action")


class DeciplaneObservation(Observation):
    """The env's text observation; for menu envs its legal actions and their mask."""

    text: str = Field(default="", description="the observation text")
    menu: list[str] = Field(default_factory=list, description="legal actions (menu envs)")
    action_mask: list[bool] = Field(default_factory=list, description="legal menu slots")
    truncated: bool = Field(default=False, description="the episode was cut (step cap)")
    info: dict[str, Any] = Field(default_factory=dict,
                                 description="the env's info, minus held-out fields")


class DeciplaneState(State):
    """Episode id and step count (OpenEnv's), plus the env id, split and return so far."""

    env_id: str = ""
    split: Optional[str] = None
    episode_return: float = 0.0


# ---- export ----------------------------------------------------------------------------------

def environment_class(env_id: str, env_kwargs: Mapping[str, Any] | None = None,
                      expose_expert: bool = False) -> type:
    """An OpenEnv ``Environment`` class whose instances each wrap a fresh
    ``deciplane.envs.make(env_id, **env_kwargs)`` (the factory ``create_app`` needs)."""
    import deciplane.envs as envs

    kwargs = dict(env_kwargs or {})
    if env_id not in envs.registry():
        raise ConfigError(f"{env_id!r} is not a registered environment; `deciplane envs` "
                          "lists them")
    if expose_expert and kwargs.get("split", "train") != "train":
        raise ConfigError("expose_expert serves the expert's actions, which only the train "
                          f"split may see; got split={kwargs.get('split')!r}")

    class _Served(Environment[DeciplaneAction, DeciplaneObservation, DeciplaneState]):
        SUPPORTS_CONCURRENT_SESSIONS = True     # one env per session: nothing is shared
        live = 0                                # envs open now (GET /deciplane/sessions)

        def __init__(self) -> None:
            super().__init__()
            self._env = envs.make(env_id, **kwargs)
            type(self).live += 1
            self._split = kwargs.get("split", getattr(self._env.unwrapped, "split", None))
            self._menu: list[str] | None = None
            self._state = DeciplaneState(env_id=env_id, split=self._split)

        def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None,
                  options: Optional[dict[str, Any]] = None, **_: Any) -> DeciplaneObservation:
            obs, info = self._env.reset(seed=seed, options=options)
            self._state = DeciplaneState(episode_id=episode_id or str(uuid.uuid4()),
                                         step_count=0, env_id=env_id, split=self._split)
            return self._observe(obs, info, reward=None, done=False, truncated=False)

        def step(self, action: DeciplaneAction, timeout_s: Optional[float] = None,
                 **_: Any) -> DeciplaneObservation:
            obs, reward, term, trunc, info = self._env.step(self._resolve(action))
            self._state.step_count += 1
            self._state.episode_return += float(reward)
            return self._observe(obs, info, reward=float(reward), done=bool(term or trunc),
                                 truncated=bool(trunc))

        @property
        def state(self) -> DeciplaneState:
            return self._state

        def get_metadata(self) -> EnvironmentMetadata:
            from deciplane import __version__

            return EnvironmentMetadata(
                name=env_id, version=__version__, author="deciplane",
                description=(f"{envs.registry().get(env_id, '')}. Served by deciplane: gold "
                             "answers, hidden tests and reference solutions are never sent; "
                             "the expert's actions only on the train split when enabled."),
                documentation_url="https://github.com/deciplane/deciplane")

        def close(self) -> None:
            env, self._env = self._env, None
            if env is not None:
                env.close()
                type(self).live -= 1

        def _resolve(self, action: DeciplaneAction) -> Any:
            if (action.index is None) == (action.command is None):
                raise ValueError("give exactly one of index (a menu index) or command")
            if self._menu is None:          # a text env
                if action.command is None:
                    raise ValueError(f"{env_id} takes text actions: send command")
                return action.command
            if action.index is not None:
                return int(action.index)
            try:
                return self._menu.index(action.command)
            except ValueError:              # not a legal action: the env's invalid step
                return len(self._menu)

        def _observe(self, obs: Any, info: Mapping[str, Any], reward: float | None,
                     done: bool, truncated: bool) -> DeciplaneObservation:
            menu = info.get("menu")
            self._menu = list(menu) if menu is not None else None
            mask = info.get("action_mask")
            return DeciplaneObservation(
                text=str(obs), menu=self._menu or [],
                action_mask=[bool(x) for x in mask[:len(self._menu)]]
                if mask is not None and self._menu is not None else [],
                info=served_info(info, self._split, expose_expert),
                reward=reward, done=done, truncated=truncated)

    _Served.__name__ = _Served.__qualname__ = "Deciplane_" + _slug(env_id)
    return _Served


def create_app(env_id: str, env_kwargs: Mapping[str, Any] | None = None, *,
               max_sessions: int = 4,
               session_timeout_s: float | None = DEFAULT_SESSION_TIMEOUT_S,
               expose_expert: bool = False) -> Any:
    """OpenEnv's own FastAPI app serving ``env_id`` (``/ws`` sessions, ``/reset``,
    ``/step``, ``/state``, ``/schema``, ``/metadata``, ``/health``)."""
    from openenv.core.env_server.http_server import create_app as openenv_app

    if int(max_sessions) < 1:
        raise ConfigError(f"max_sessions must be >= 1, got {max_sessions}")
    if session_timeout_s is not None and float(session_timeout_s) <= 0:
        raise ConfigError(f"session_timeout_s must be > 0 (or None), got {session_timeout_s}")
    cls = environment_class(env_id, env_kwargs, expose_expert)
    app = openenv_app(cls, DeciplaneAction, DeciplaneObservation, env_name=_slug(env_id),
                      concurrency_config=ConcurrencyConfig(
                          max_concurrent_envs=int(max_sessions),
                          session_timeout=None if session_timeout_s is None
                          else float(session_timeout_s)),
                      state_cls=DeciplaneState)

    @app.get("/deciplane/sessions")
    def sessions() -> dict[str, int]:
        """Environments open now and the bound (a closed or reaped session frees one)."""
        return {"active": cls.live, "max": int(max_sessions)}

    return app


def serve(env_id: str, env_kwargs: Mapping[str, Any] | None = None, host: str = "127.0.0.1",
          port: int = 8000, **options: Any) -> None:
    """Serve ``env_id`` with uvicorn until interrupted (localhost by default: a served
    CodeGen or CodeOpt env runs the client's programs, inside deciplane's Sandbox)."""
    import uvicorn

    app = create_app(env_id, env_kwargs, **options)     # bad options fail before the line
    print(f"serving {env_id} at http://{host}:{port} (WebSocket /ws, "
          f"{options.get('max_sessions', 4)} sessions, idle timeout "
          f"{options.get('session_timeout_s', DEFAULT_SESSION_TIMEOUT_S)} s)", flush=True)
    uvicorn.run(app, host=host, port=int(port), log_level="warning")


def write_openenv_folder(folder: str | Path, env_id: str,
                         env_kwargs: Mapping[str, Any] | None = None, *,
                         max_sessions: int = 4, port: int = 8000) -> Path:
    """The folder ``openenv build`` / ``openenv validate`` expect: ``openenv.yaml``,
    ``server/app.py`` (this module's app for ``env_id``), ``server/Dockerfile``,
    ``server/requirements.txt``, ``pyproject.toml`` and a README. Building the image needs
    internet (OpenEnv's base image and PyPI)."""
    import json

    from deciplane import __version__

    folder = Path(folder)
    slug = _slug(env_id)
    (folder / "server").mkdir(parents=True, exist_ok=True)
    kwargs_json = json.dumps(jsonable(dict(env_kwargs or {})), sort_keys=True)
    files = {
        "openenv.yaml": _OPENENV_YAML.format(name=slug, version=__version__, port=int(port)),
        "server/__init__.py": "",
        "server/app.py": _APP_PY.format(env_id=env_id, kwargs=kwargs_json,
                                        sessions=int(max_sessions), port=int(port)),
        "server/requirements.txt": f"deciplane[interop]=={__version__}\n",
        "server/Dockerfile": _DOCKERFILE.format(version=__version__, port=int(port)),
        "pyproject.toml": _PYPROJECT.format(name=slug, version=__version__),
        "README.md": _README.format(env_id=env_id, kwargs=kwargs_json, port=int(port)),
    }
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def _slug(env_id: str) -> str:
    """``deciplane/TextWorldExpress-v0`` -> ``deciplane_textworldexpress_v0``."""
    return "".join(c if c.isalnum() else "_" for c in env_id).strip("_").lower()


_OPENENV_YAML = """\
spec_version: 1
name: {name}
version: {version}
type: space
runtime: fastapi
app: server.app:app
port: {port}
validation:
  reward:
    range: [-1.0, 1.0]
    oracle_tolerance: 0.0
    floor_margin: 0.1
  resources:
    cpu: 1.0
    memory_mb: 2048
    disk_mb: 1024
    episode_timeout_s: 600.0
  capabilities:
    verifier:
      kind: reward_channel
  types:
    tags: [deciplane]
"""

_APP_PY = '''\
"""OpenEnv server for {env_id}, written by `deciplane serve --export`."""
import json

from deciplane.interop.openenv import create_app

app = create_app({env_id!r}, json.loads({kwargs!r}), max_sessions={sessions})


def main() -> None:
    import uvicorn

    uvicorn.run(app, host="0.0.0.0", port={port})


if __name__ == "__main__":
    main()
'''

_DOCKERFILE = """\
# Built by `openenv build` (needs internet: the base image and PyPI). TextWorld-Express
# games also need a Java runtime (openjdk-17-jre-headless).
ARG BASE_IMAGE=ghcr.io/huggingface/openenv-base:latest
FROM ${{BASE_IMAGE}}
WORKDIR /app/env
COPY . /app/env
RUN pip install --no-cache-dir torch --index-url https://download.pytorch.org/whl/cpu \\
 && pip install --no-cache-dir -r server/requirements.txt
EXPOSE {port}
HEALTHCHECK CMD python -c "import urllib.request; urllib.request.urlopen('http://localhost:{port}/health')"
CMD ["uvicorn", "server.app:app", "--host", "0.0.0.0", "--port", "{port}"]
"""

_PYPROJECT = """\
[project]
name = "{name}"
version = "{version}"
requires-python = ">=3.10"
dependencies = ["deciplane[interop]=={version}"]

[project.scripts]
server = "server.app:main"
"""

_README = """\
# {env_id} as an OpenEnv environment

Written by `deciplane serve {env_id} --export DIR`; env kwargs: `{kwargs}`.

    uvicorn server.app:app --port {port}      # or: openenv build && openenv push

Actions: `{{"index": i}}` (a menu index) or `{{"command": "..."}}`; observations: `text`,
`menu`, `action_mask`, `info` (gold answers and hidden tests are never served).
"""


# ---- import ----------------------------------------------------------------------------------

class OpenEnvGymEnv(gym.Env):
    """An OpenEnv environment as a Gymnasium env with deciplane's text/menu contract.

    ``source``: a server URL (``http://127.0.0.1:8000``; a WebSocket session, one per env),
    or an OpenEnv ``Environment`` class (instantiated here) or instance, stepped in process.
    Observations are text (the observation's ``text_field``, else its fields as JSON).
    When the observation lists legal actions (``menu_field``, default ``menu``), the env is
    a menu env: ``Discrete(max_menu)`` actions, ``info["menu"]`` and ``info["action_mask"]``,
    and the chosen line is sent as ``{action_field: line}``; otherwise actions are text.
    For a server written by deciplane the defaults fit (its action takes ``command``)."""

    metadata = {"render_modes": []}

    def __init__(self, source: Any, *, action_cls: Any = None, text_field: str = "text",
                 menu_field: str = "menu", action_field: str = "command", max_menu: int = 64,
                 message_timeout_s: float = DEFAULT_SESSION_TIMEOUT_S,
                 reset_kwargs: Mapping[str, Any] | None = None) -> None:
        from deciplane.envs.menu.text import MAX_OBS_CHARS, OBS_CHARSET
        from deciplane.envs.spaces import ObservationText

        self.text_field, self.menu_field, self.action_field = text_field, menu_field, action_field
        self.max_menu = int(max_menu)
        self.reset_kwargs = dict(reset_kwargs or {})
        self._client = None
        self._local = None
        self._action_cls = action_cls
        if isinstance(source, str):
            from openenv.core.generic_client import GenericEnvClient

            self._client = GenericEnvClient(base_url=source,
                                            message_timeout_s=float(message_timeout_s)).sync()
            self._client.connect()
        elif isinstance(source, type) and issubclass(source, Environment):
            self._local = source()
        elif isinstance(source, Environment):
            self._local = source
        else:
            raise ConfigError(f"from_openenv needs a server URL, an OpenEnv Environment class "
                              f"or instance; got {type(source).__name__}")
        if self._local is not None and self._action_cls is None:
            self._action_cls = _action_type(self._local)
        self.observation_space = ObservationText(max_length=MAX_OBS_CHARS, min_length=0,
                                                 charset=OBS_CHARSET)
        self.action_space: gym.Space = gym.spaces.Discrete(self.max_menu)
        self._menu: list[str] | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        kwargs = dict(self.reset_kwargs)
        if seed is not None:
            kwargs["seed"] = int(seed)
        if options:
            kwargs["options"] = dict(options)
        obs, _, _, _, info = self._result(self._call("reset", kwargs))
        return obs, info

    def step(self, action: Any):
        if self._menu is not None:
            i = int(action)
            line = self._menu[i] if 0 <= i < len(self._menu) else ""
            payload = {self.action_field: line}
        else:
            payload = {self.action_field: str(action)}
        return self._result(self._call("step", payload))

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.close()
        local, self._local = self._local, None
        if local is not None:
            local.close()
        super().close()

    # ---- plumbing ----
    def _call(self, what: str, data: dict[str, Any]) -> dict[str, Any]:
        if self._client is not None:
            result = self._client.reset(**data) if what == "reset" else self._client.step(data)
            obs = result.observation if isinstance(result.observation, dict) else {}
            return {"observation": obs, "reward": result.reward, "done": result.done}
        if self._local is None:
            raise ConfigError("this env was closed")
        if what == "reset":
            o = self._local.reset(**data)
        else:
            o = self._local.step(self._action_cls(**data))
        d = o.model_dump()
        return {"observation": d, "reward": d.get("reward"), "done": bool(d.get("done"))}

    def _result(self, r: dict[str, Any]):
        o = dict(r["observation"] or {})
        menu = o.get(self.menu_field)
        text = o.get(self.text_field)
        if not isinstance(text, str):
            import json

            text = json.dumps({k: v for k, v in o.items()
                               if k not in ("reward", "done", "metadata")}, sort_keys=True)
        info: dict[str, Any] = dict(o.get("info") or {})
        if isinstance(menu, list) and (menu or self._menu is not None):
            from deciplane.types import Menu

            if len(menu) > self.max_menu:
                raise ConfigError(f"the OpenEnv observation lists {len(menu)} actions, more "
                                  f"than max_menu={self.max_menu}; pass a larger max_menu")
            self._menu = [str(a) for a in menu]
            info["menu"] = Menu(tuple(self._menu))
            info["action_mask"] = info["menu"].mask(self.max_menu)
        elif self._menu is None and not isinstance(self.action_space, gym.spaces.Text):
            self.action_space = gym.spaces.Text(max_length=65_536, min_length=0)
        reward = float(r.get("reward") or 0.0)
        done = bool(r.get("done"))
        truncated = bool(o.get("truncated", False)) and done
        return text, reward, done and not truncated, truncated, info


def _action_type(env: Any) -> Any:
    """The Action class an in-process Environment's ``step`` takes (its generic argument)."""
    for base in getattr(type(env), "__orig_bases__", ()):
        args = getattr(base, "__args__", ())
        if args and isinstance(args[0], type) and issubclass(args[0], Action):
            return args[0]
    raise ConfigError(f"cannot tell the Action type of {type(env).__name__}; pass action_cls=")


def from_openenv(source: Any, *, register_as: str | None = None, **options: Any) -> gym.Env:
    """An OpenEnv environment (server URL, ``Environment`` class or instance) as a
    Gymnasium env (:class:`OpenEnvGymEnv`; ``options`` go to it). With ``register_as``,
    also registered under that id (``deciplane.envs.register``) so that ``gym.make``,
    ``deciplane train`` and ``deciplane evaluate`` build it like any plug-in (a class or URL
    source: every env gets its own instance or session)."""
    if register_as is not None:
        from deciplane.envs import register

        if isinstance(source, Environment):
            raise ConfigError("register_as needs a URL or an Environment class (each env "
                              "built from the id gets its own); got an instance")

        def entry_point(**kwargs: Any) -> OpenEnvGymEnv:
            return OpenEnvGymEnv(source, **{**options, **kwargs})

        register(register_as, entry_point,
                 description=f"OpenEnv environment {getattr(source, '__name__', source)}")
    return OpenEnvGymEnv(source, **options)


__all__ = ["DeciplaneAction", "DeciplaneObservation", "DeciplaneState", "OpenEnvGymEnv",
           "WITHHELD_INFO", "create_app", "environment_class", "from_openenv", "jsonable",
           "serve", "served_info", "write_openenv_folder"]
