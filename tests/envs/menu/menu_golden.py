"""Fixed-seed, fixed-action plays of the menu envs, reduced to one digest per step, so a
speed change can be checked to leave every observation, reward, flag and info untouched.

    python tests/envs/menu/menu_golden.py --record   # rewrite tests/envs/menu/menu_golden.json

Record only from code whose outputs are known good (the digests were first recorded
before issue 23's step-speed work)."""

from __future__ import annotations

import hashlib
import json
import sys
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np

GOLDEN = Path(__file__).with_name("menu_golden.json")
TW_FINGERPRINT = "f9588416297797d8"  # the embedded suite's test split (README, benchmarks)
TEXT_EXTRAS = ("xyzzy", "quit", "", "take\x00 key", "  OPEN   the  DOOR ", "x" * 5000,
               "\\help", "look")


def canon(value: Any) -> Any:
    """A JSON form of an info value that keeps its type (a value turned from int into
    np.int64, or a tuple into a list, changes the digest)."""
    from deciplane.types import Menu

    if isinstance(value, Menu):
        return ["Menu", list(value.actions)]
    if isinstance(value, np.ndarray):
        return ["ndarray", str(value.dtype), list(value.shape), value.tolist()]
    if isinstance(value, (list, tuple)):
        return [type(value).__name__, [canon(v) for v in value]]
    if isinstance(value, dict):
        return ["dict", [[k, canon(v)] for k, v in value.items()]]
    if value is None or isinstance(value, (bool, int, float, str)):
        return [type(value).__name__, value]
    return [type(value).__name__, repr(value)]


def portable(record: tuple) -> tuple:
    """``record`` with ``info["game"]`` (a path under ``$DECIPLANE_HOME`` for TextWorld) cut
    to its file name, so the digests do not depend on where the games are cached, and
    without ``info["state_key"]`` (added after the digests were recorded, issue 48: the
    digests still check every other entry)."""
    return tuple(_without_state_key({**r, "game": Path(r["game"]).name} if isinstance(r, dict)
                                    and "game" in r else r) for r in record)


def _without_state_key(r: Any) -> Any:
    return {k: v for k, v in r.items() if k != "state_key"} if isinstance(r, dict) else r


def digest(record: Any) -> str:
    blob = json.dumps(canon(record), separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def play(env: Any, episodes: list[dict], choose: Callable, max_steps: int) -> list[list]:
    """Per episode: the reset's ``(obs, info)`` then every step's 5-tuple, as records."""
    out = []
    for ep, opts in enumerate(episodes):
        rng = np.random.default_rng(1000 + ep)
        obs, info = env.reset(**opts)
        records = [("reset", obs, info, env.unwrapped.render() if env.unwrapped.render_mode
                    else None)]
        for _ in range(max_steps):
            step = env.step(choose(rng, info))
            records.append(("step",) + tuple(step))
            info = step[4]
            if step[2] or step[3]:
                break
        out.append(records)
    return out


def random_index(rng: np.random.Generator, info: dict) -> int:
    """A menu index, sometimes a masked one (an invalid move) inside the action space."""
    return int(rng.integers(min(len(info["menu"]) + 2, len(info["action_mask"]))))


def expert_or_random(rng: np.random.Generator, info: dict) -> int:
    if info.get("expert_action") is not None and rng.random() < 0.6:
        return int(info["expert_action"])
    return random_index(rng, info)


def text_command(rng: np.random.Generator, info: dict) -> str:
    if rng.random() < 0.25:
        return TEXT_EXTRAS[int(rng.integers(len(TEXT_EXTRAS)))]
    menu = list(info["menu"])
    command = menu[int(rng.integers(len(menu)))] if menu else "look"
    return command.upper() if rng.random() < 0.2 else command


def textworld_scenarios() -> dict[str, tuple[dict, list[dict], Callable, int]]:
    """name -> (gym.make kwargs, reset kwargs per episode, chooser, steps per episode)."""
    seeds = [{"seed": s} for s in range(6)]
    games = [{"seed": 10 + g, "options": {"game": g}} for g in range(6)]
    return {
        "tw-default": ({}, seeds, random_index, 25),
        "tw-expert-shuffled": ({"expert": True, "menu_order": "shuffled",
                                "task_in_observation": True, "invalid_action_penalty": -0.1},
                               games, expert_or_random, 30),
        "tw-state-view": ({"expert": True, "observation": "state", "max_episode_steps": 15,
                           "render_mode": "ansi"}, seeds, expert_or_random, 20),
        "tw-text": ({"action_mode": "text"}, games, text_command, 20),
        "tw-paged": ({"expert": True, "max_menu": 4, "menu_overflow": "page"}, games,
                     expert_or_random, 30),
    }


def twx_scenarios() -> dict[str, tuple[dict, list[dict], Callable, int]]:
    seeds = [{"seed": s} for s in range(4)]
    return {
        "twx-coin": ({"game": "coin", "game_params": {"numLocations": 4}}, seeds,
                     random_index, 25),
        "twx-cooking-expert": ({"game": "cookingworld", "expert": True, "max_menu": 128,
                                "menu_order": "shuffled", "invalid_action_penalty": -0.1},
                               seeds, expert_or_random, 30),
        # twc without its expert: the replanner's choice between two objects varies from
        # one JVM to the next (the gold path it learns from is not always the same)
        "twx-twc-state": ({"game": "twc", "observation": "state", "max_menu": 128}, seeds,
                          random_index, 25),
        "twx-coin-text": ({"game": "coin", "action_mode": "text"}, seeds, text_command, 20),
        "twx-cooking-paged": ({"game": "cookingworld", "expert": True, "max_menu": 6,
                               "menu_overflow": "page"}, seeds, expert_or_random, 30),
    }


def run_scenario(env_id: str, kwargs: dict, episodes: list[dict], choose: Callable,
                 steps: int, **extra: Any) -> list[list[str]]:
    import gymnasium as gym

    import deciplane  # noqa: F401  (registers the environments)

    env = gym.make(env_id, **kwargs, **extra)
    try:
        return [[digest(portable(r)) for r in ep] for ep in play(env, episodes, choose, steps)]
    finally:
        env.close()


def textworld_digests() -> dict[str, list[list[str]]]:
    from deciplane.envs.textworld.games import make_game_suite

    suite = make_game_suite("embedded", "test")
    assert suite.fingerprint == TW_FINGERPRINT, suite.fingerprint
    return {name: run_scenario("deciplane/TextWorld-v0", kw, eps, choose, n, games=suite)
            for name, (kw, eps, choose, n) in textworld_scenarios().items()}


def twx_digests() -> dict[str, list[list[str]]]:
    return {name: run_scenario("deciplane/TextWorldExpress-v0", kw, eps, choose, n)
            for name, (kw, eps, choose, n) in twx_scenarios().items()}


if __name__ == "__main__":
    warnings.filterwarnings("ignore")
    if "--record" not in sys.argv:
        sys.exit(__doc__)
    data = {"textworld_fingerprint": TW_FINGERPRINT, "textworld": textworld_digests(),
            "twx": twx_digests()}
    GOLDEN.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {GOLDEN}: {sum(len(e) for s in data['textworld'].values() for e in s)} + "
          f"{sum(len(e) for s in data['twx'].values() for e in s)} records")
