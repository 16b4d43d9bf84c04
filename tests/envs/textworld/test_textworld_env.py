"""deciplane/TextWorld-v0 and its offline game suites, on real tw-make games."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import deciplane
from deciplane.envs import textworld_games as tg
from deciplane.envs.textworld.env import (TextWorldEnv, clean_observation, normalize_command,
                                          strip_banner)
from deciplane.errors import ConfigError, GameError, InvalidAction, UnknownPreset

pytestmark = pytest.mark.filterwarnings("ignore::jericho.UnsupportedGameWarning")
ENV_ID = "deciplane/TextWorld-v0"
# The test split of every preset: the embedded mix's parts plus a small custom game.
PRESET_SUITES = [(p, n, o) for p, n, o in tg.EMBEDDED_MIX] + [
    ("custom", 1, {"world_size": 2, "nb_objects": 4, "quest_length": 2})]


@pytest.fixture(scope="session")
def suites() -> dict[str, tg.GameSuite]:
    """All test-split suites, generated in one batch of tw-make workers (cached)."""
    specs = [(p, tg.resolve_options(p, o), "test", n, 0) for p, n, o in PRESET_SUITES]
    tg._prefetch(specs, progress=False)
    out = {p: tg.make_game_suite(p, "test", n, **o) for p, n, o in PRESET_SUITES}
    out["embedded"] = tg.make_game_suite("embedded", "test")
    return out


def play_expert(env: gym.Env, game: int) -> tuple[dict, float, int]:
    obs, info = env.reset(options={"game": game})
    total, steps = 0.0, 0
    while True:
        assert "expert_action" in info, f"no expert action in {info['game_name']}"
        obs, r, term, trunc, info = env.step(info["expert_action"])
        total, steps = total + r, steps + 1
        if term or trunc:
            return info, total, steps


# ---- the expert, rewards, random play -----------------------------------------------------


@pytest.mark.parametrize("preset", [p for p, _, _ in PRESET_SUITES])
def test_expert_wins_every_test_game_and_rewards_sum_to_score(suites, preset):
    suite = suites[preset]
    env = gym.make(ENV_ID, games=suite, expert=True)
    for i in range(len(suite)):
        info, total, steps = play_expert(env, i)
        assert info["won"] and not info["lost"], info["game_name"]
        assert total == info["score"] == info["max_score"] > 0
        assert info["split_fingerprint"] == suite.fingerprint
    env.close()


def test_random_play_500_steps(suites):
    env = gym.make(ENV_ID, games=suites["embedded"], max_episode_steps=40,
                   invalid_action_penalty=-0.1)
    rng = np.random.default_rng(0)
    obs, info = env.reset(seed=0)
    episodes, total, invalid = 0, 0.0, 0
    for _ in range(500):
        assert env.observation_space.contains(obs)
        # mostly legal indices, sometimes a masked one
        a = int(rng.integers(len(info["menu"]))) if rng.random() < 0.9 else env.action_space.n - 1
        obs, r, term, trunc, info = env.step(a)
        total += r
        invalid += info["invalid_action"]
        if term or trunc:
            # without invalid moves the rewards sum to the score
            assert total == pytest.approx(info["score"] - 0.1 * info["invalid_actions"])
            episodes, total = episodes + 1, 0.0
            obs, info = env.reset()
    assert episodes >= 5 and invalid > 0
    env.close()


# ---- Gymnasium contract -------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["menu", "text"])
def test_check_env(suites, mode):
    env = TextWorldEnv(games=suites["embedded"], action_mode=mode, expert=True)
    check_env(env, skip_render_check=True)
    env.close()


def test_registered_and_menu_contract(suites):
    env = gym.make(ENV_ID, games=suites["embedded"], expert=True, max_menu=32)
    assert ENV_ID in deciplane.envs.registered_ids()
    obs, info = env.reset(seed=3)
    menu = info["menu"]
    assert isinstance(menu, deciplane.Menu) and len(menu) > 0
    assert list(menu.actions) == sorted(menu.actions)
    assert not any(a.startswith("\\") for a in menu)
    assert info["action_mask"].dtype == bool and info["action_mask"].sum() == len(menu)
    assert env.action_space == gym.spaces.Discrete(32)
    assert 0 <= info["expert_action"] < len(menu)
    assert info["expert_command"] == menu[info["expert_action"]]
    assert "TextWorld" not in obs.split("\n")[0] or "$$" not in obs  # banner stripped
    env.close()


def test_shuffled_menus_expert_follows_and_task_in_observation(suites):
    suite = suites["embedded"]
    plain = gym.make(ENV_ID, games=suite, expert=True)
    shuf = gym.make(ENV_ID, games=suite, expert=True, menu_order="shuffled",
                    task_in_observation=True)
    _, ip = plain.reset(seed=3)
    obs, i1 = shuf.reset(seed=3)
    assert i1["game_name"] == ip["game_name"] and i1["menu_seed"] == 3
    assert sorted(i1["menu"]) == list(ip["menu"]) and i1["menu"] != ip["menu"]
    assert i1["menu"][i1["expert_action"]] == ip["expert_command"] == i1["expert_command"]
    assert i1["task"] and obs.startswith(i1["task"])
    assert shuf.reset(seed=3)[1]["menu"] == i1["menu"]  # same seed, same order
    other = shuf.reset(seed=3, options={"menu_seed": 4})[1]["menu"]
    assert other != i1["menu"] and sorted(other) == sorted(i1["menu"])
    for i in range(len(suite)):  # the expert still wins every game, through shuffled menus
        info, total, _ = play_expert(shuf.unwrapped, i)
        assert info["won"] and total == info["max_score"]
    plain.close()
    shuf.close()


def test_paged_menus_textworld(suites):
    from deciplane.envs.menu.menu import PAGE_ACTION
    from deciplane.errors import MenuTooLarge

    suite = suites["embedded"]
    with pytest.raises(MenuTooLarge, match="menu_overflow='page'"):
        TextWorldEnv(games=suite, max_menu=3).reset(seed=0)
    env = gym.make(ENV_ID, games=suite, expert=True, max_menu=4, menu_overflow="page",
                   menu_order="shuffled")
    turns = 0
    for i in range(len(suite)):
        obs, info = env.reset(seed=i, options={"game": i})
        while True:
            assert len(info["menu"]) <= 4
            a = info["expert_action"]
            turn = info["expert_command"] == PAGE_ACTION
            assert info["menu"][a] == info["expert_command"]
            obs2, r, term, trunc, info2 = env.step(a)
            if turn:
                turns += 1
                assert obs2 == obs and r == 0 and not info2["invalid_action"]
                assert info2["menu_page"] == (info["menu_page"] + 1) % info["menu_pages"]
            obs, info = obs2, info2
            if term or trunc:
                break
        assert info["won"], info["game_name"]
    assert turns > 0
    env.close()


def test_seed_determinism(suites):
    def rollout(seed):
        env = gym.make(ENV_ID, games=suites["embedded"])
        obs, info = env.reset(seed=seed)
        seen = [(info["game_name"], obs)]
        rng = np.random.default_rng(seed)
        for _ in range(8):
            obs, r, term, trunc, info = env.step(int(rng.integers(len(info["menu"]))))
            seen.append((obs, r, term, info["menu"].actions))
            if term or trunc:
                break
        env.close()
        return seen

    assert rollout(5) == rollout(5)
    games = {rollout(s)[0][0] for s in range(12)}
    assert len(games) > 1  # different seeds reach different games


def test_reset_cycles_through_the_suite(suites):
    env = gym.make(ENV_ID, games=suites["embedded"])
    env.reset(seed=1)
    names = [env.reset()[1]["game_name"] for _ in range(len(suites["embedded"]) - 1)]
    assert len(set(names)) == len(names)
    assert env.reset(options={"game": 2})[1]["game_index"] == 2
    name = suites["embedded"].names[4]
    assert env.reset(options={"game": name})[1]["game_name"] == name
    with pytest.raises(ConfigError, match="suite has"):
        env.reset(options={"game": 99})
    env.close()


def test_vector_envs_sync_and_async(suites):
    """Same seeds and expert actions: Sync, Async (shared memory or pipes) agree, and the
    observations are the real texts (gymnasium 1.4 would freeze Text shared memory)."""
    fns = [lambda: gym.make(ENV_ID, games=suites["embedded"], expert=True,
                            max_episode_steps=10) for _ in range(2)]
    runs = []
    for vec in (gym.vector.SyncVectorEnv(fns), gym.vector.AsyncVectorEnv(fns),
                gym.vector.AsyncVectorEnv(fns, shared_memory=False)):
        obs, infos = vec.reset(seed=[0, 1])
        assert len(obs) == 2 and isinstance(infos["menu"][0], deciplane.Menu)
        seen, wins = [tuple(obs)], 0
        for _ in range(8):
            # the expert's index where there is one (0 for a sub-env that is resetting)
            actions = np.where(infos.get("_expert_action", np.zeros(2, bool)),
                               infos.get("expert_action", 0), 0).astype(np.int64)
            obs, rew, term, trunc, infos = vec.step(actions)
            assert rew.shape == (2,) and infos["action_mask"].shape == (2, 64)
            seen.append(tuple(obs))
            wins += int(np.sum(term & infos["won"]))
        assert wins >= 2
        runs.append(seen)
        vec.close()
    assert runs[0] == runs[1] == runs[2]
    assert all(isinstance(o, str) and len(o) > 10 for o in runs[1][1])


# ---- invalid actions and errors ------------------------------------------------------------


def test_index_outside_space_raises_and_masked_index_is_invalid_move(suites):
    env = gym.make(ENV_ID, games=suites["embedded"], max_menu=40, invalid_action_penalty=-1)
    obs, info = env.reset(seed=0)
    with pytest.raises(InvalidAction, match=r"Discrete\(40\).*menu has \d+ actions"):
        env.step(40)
    with pytest.raises(InvalidAction):
        env.step(-1)
    masked = len(info["menu"])
    obs2, r, term, trunc, info2 = env.step(masked)
    assert (obs2, r, term, trunc) == (obs, -1.0, False, False)
    assert info2["invalid_action"] and info2["invalid_actions"] == 1
    assert info2["menu"] == info["menu"] and info2["moves"] == 1
    env.close()


def test_empty_menu_truncates_instead_of_hanging(suites):
    """TextWorld always offers look/inventory, so an empty menu only comes from other
    games; emulate one by dropping the actions and check the defined outcome."""

    class NoActions(TextWorldEnv):
        def _observe(self, state, command=None):
            super()._observe(state, command)
            self._view.show(())  # a state with no legal action

    env = NoActions(games=suites["embedded"])
    obs, info = env.reset(seed=0)
    assert not info["action_mask"].any()
    _, r, term, trunc, info = env.step(0)
    assert (r, term, trunc) == (0.0, False, True)
    assert info["empty_menu"] and info["invalid_action"]
    env.close()


@pytest.mark.parametrize("limit", [None, 150])
def test_episode_limit_follows_gym_make(suites, limit):
    kwargs = {} if limit is None else {"max_episode_steps": limit}
    env = gym.make(ENV_ID, games=suites["embedded"], **kwargs)
    _, info = env.reset(seed=0)
    masked = env.action_space.n - 1  # invalid moves: cheap, and they count as steps
    for t in range(1, (limit or 100) + 1):
        _, _, term, trunc, info = env.step(masked)
        assert trunc == (t == (limit or 100)) and not term
    assert info["moves"] == (limit or 100)
    env.close()


def test_text_mode_counts_invalid_commands(suites):
    env = gym.make(ENV_ID, games=suites["embedded"], action_mode="text", expert=True)
    obs, info = env.reset(options={"game": 0})
    _, r, term, trunc, info = env.step("dance wildly")
    assert info["invalid_action"] and not term and r == 0.0
    for bad in ("", "   ", "quit", "restart", "\\x", b"\xff\xfe"[:0]):
        _, r, term, trunc, info = env.step(bad)
        assert info["invalid_action"] and not term
    with pytest.raises(InvalidAction, match="UTF-8"):
        env.step(b"\xff\xfe")
    _, _, _, _, info = env.step("  " + info["expert_command"].upper() + " ")
    assert not info["invalid_action"]
    while True:
        _, r, term, trunc, info = env.step(info["expert_command"])
        if term or trunc:
            break
    assert info["won"] and info["invalid_actions"] == 7
    env.close()


def test_unknown_preset_and_bad_options():
    with pytest.raises(UnknownPreset, match="tw-simple.*tw-cooking"):
        gym.make(ENV_ID, games="tw-zork")
    with pytest.raises(ConfigError, match="allowed: level"):
        tg.make_game_suite("tw-coin_collector", "test", 1, colour="red")
    with pytest.raises(GameError, match=r"tw-make failed for tw-coin_collector-test-s60000: "
                                        r".*level to be within \[1-300\]"):
        tg.make_game_suite("tw-coin_collector", "test", 1, level=999)
    with pytest.raises(ConfigError, match="train, valid, test"):
        gym.make(ENV_ID, split="dev")
    with pytest.raises(ConfigError, match="menu.*text"):
        gym.make(ENV_ID, action_mode="speech")


def test_missing_and_corrupt_game_files(suites, tmp_path):
    src = suites["tw-treasure_hunter"].paths[0]
    with pytest.raises(GameError, match="does not exist"):
        gym.make(ENV_ID, games=[tmp_path / "nope.z8"])
    good = tmp_path / "good.z8"
    shutil.copy(src, good)
    with pytest.raises(GameError, match="no good.json"):
        gym.make(ENV_ID, games=[good])
    shutil.copy(src.with_suffix(".json"), good.with_suffix(".json"))
    env = gym.make(ENV_ID, games=[good], expert=True)  # a user-provided game works
    assert env.reset(seed=0)[1]["game_name"] == "good"
    env.close()
    for games in (str(good), tmp_path):  # one path, or a folder of games
        env = gym.make(ENV_ID, games=games)
        assert env.unwrapped.num_tasks == 1
        env.close()
    (tmp_path / "empty").mkdir()
    with pytest.raises(GameError, match="no .z8 games"):
        gym.make(ENV_ID, games=tmp_path / "empty")
    bad = tmp_path / "bad.z8"
    data = bytearray(src.read_bytes())
    data[5000] ^= 0xFF
    bad.write_bytes(bytes(data))
    shutil.copy(src.with_suffix(".json"), bad.with_suffix(".json"))
    with pytest.raises(GameError, match="corrupt.*checksum"):
        gym.make(ENV_ID, games=[bad])
    bad.write_bytes(b"not a story file")
    with pytest.raises(GameError, match="corrupt"):
        gym.make(ENV_ID, games=[bad])
    good.with_suffix(".json").write_text("{not json")
    with pytest.raises(GameError, match="json.*corrupt"):
        gym.make(ENV_ID, games=[good])


# ---- the suite cache -----------------------------------------------------------------------


def test_cache_reuse_generates_nothing(suites, monkeypatch):
    def fail(*a, **k):
        raise AssertionError("generated again")

    monkeypatch.setattr(tg, "run_tw_make", fail)
    again = tg.make_game_suite("embedded", "test")
    assert again.fingerprint == suites["embedded"].fingerprint
    # a smaller suite of the same preset reuses the games too
    small = tg.make_game_suite("tw-coin_collector", "test", 1, level=2)
    assert small.paths == suites["tw-coin_collector"].paths[:1]
    manifest = json.loads((small.paths[0].parent / "manifest-n1.json").read_text())
    assert manifest["fingerprint"] == small.fingerprint
    assert manifest["games"][0]["sha256"] == tg.sha256_file(small.paths[0])


def test_corrupt_cache_entry_is_regenerated_identically(suites):
    path = suites["tw-treasure_hunter"].paths[1]
    good = path.read_bytes()
    path.write_bytes(good[:1000])
    suite = tg.make_game_suite("tw-treasure_hunter", "test", 2, level=2)
    assert path.read_bytes() == good
    assert suite.fingerprint == suites["tw-treasure_hunter"].fingerprint


_GEN = """
import json, sys
from deciplane.envs.textworld.games import make_game_suite
s = make_game_suite("tw-treasure_hunter", sys.argv[1], 1, level=1)
print(json.dumps({"fp": s.fingerprint, "sha": s.manifest["games"][0]["sha256"]}))
"""


def test_concurrent_generation_and_disjoint_splits(tmp_path):
    env = dict(os.environ, DECIPLANE_HOME=str(tmp_path))
    run = lambda split: subprocess.Popen([sys.executable, "-c", _GEN, split], env=env,  # noqa: E731
                                         stdout=subprocess.PIPE, text=True)
    procs = [run("test"), run("test"), run("train")]
    outs = [json.loads(p.communicate(timeout=600)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert outs[0] == outs[1]                  # same suite, not corrupted by the race
    assert outs[2]["sha"] != outs[0]["sha"]    # train and test hold different games
    files = list((tmp_path / "games").rglob("*.z8"))
    assert len(files) == 2 and not list((tmp_path / "games").glob(".gen-*"))


# ---- pure helpers --------------------------------------------------------------------------


def test_helpers():
    assert deciplane.envs.make_game_suite is tg.make_game_suite  # public lazy name
    assert deciplane.envs.TextWorldEnv is TextWorldEnv
    assert normalize_command("  Take   the Coin\n") == "take the coin"
    assert clean_observation("caf\u00e9 \u4e2d\x00!") == "caf\u00e9 ??!"
    banner = "  __  \n |  \\ \n \\$$ \n\nWelcome!\n-= Room =-"
    assert strip_banner(banner) == "Welcome!\n-= Room =-"
    assert strip_banner("Hello") == "Hello"
    assert tg.z8_problem(b"\x08" + b"\0" * 10) .startswith("11 bytes")
    assert tg.resolve_options("tw-cooking", {"cut": True})["cut"] is True
    a = {"name": "g", "sha256": "1", "json_sha256": "2"}
    b = {"name": "g", "sha256": "3", "json_sha256": "4"}
    assert tg._manifest_fingerprint([a, b]) != tg._manifest_fingerprint([a])
    assert tg._manifest_fingerprint([a]) == tg.fingerprint({"g": "1:2"})
    assert "open" not in tg.resolve_options("tw-cooking", {})  # False flags are omitted
