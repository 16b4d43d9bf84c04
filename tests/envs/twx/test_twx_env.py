"""deciplane/TextWorldExpress-v0 on the real textworld-express package (one JVM per env)."""

from __future__ import annotations

import os
import shutil
import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import ResetNeeded
from gymnasium.utils.env_checker import check_env

from deciplane.envs.menu.menu import PAGE_ACTION
from deciplane.envs.twx import GAMES, TextWorldExpressEnv, canonical_params, fold_fingerprint
from deciplane.envs.twx.java import java_status, parse_java_version
from deciplane.errors import (ConfigError, GameError, InvalidAction, JavaUnavailable,
                              MenuTooLarge)

pytest.importorskip("textworld_express")
pytestmark = pytest.mark.skipif(shutil.which("java") is None,
                                reason="TextWorld-Express needs java (deciplane doctor)")
ENV_ID = "deciplane/TextWorldExpress-v0"
BIG = 128  # cookingworld with default parameters offers up to ~70 actions


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture(scope="module")
def coin():
    env = TextWorldExpressEnv(game="coin", game_params={"numLocations": 4}, expert=True)
    yield env
    env.close()


# ---- every game: check_env, expert wins, menu size policy -------------------------------------


@pytest.mark.parametrize("game", GAMES)
def test_every_game_check_env_and_expert_wins_with_shuffled_menus(game):
    env = gym.make(ENV_ID, game=game, split="test", expert=True, max_menu=BIG,
                   menu_order="shuffled")
    try:
        check_env(env.unwrapped, skip_render_check=True)
        for ep in range(3):
            obs, info = env.reset(seed=100 + ep)
            assert info["task"] and obs.startswith(info["task"])  # the goal in every obs
            assert info["fold"] == "test" and 20000 <= info["game_seed"] <= 20999
            total, done = 0.0, False
            while not done:
                a = info["expert_action"]
                assert a is not None, (game, info["moves"])
                assert info["menu"][a] == info["expert_command"]  # index follows the shuffle
                assert info["action_mask"][a]
                obs, r, term, trunc, info = env.step(a)
                assert obs.startswith(info["task"])
                total += r
                done = term or trunc
            assert info["won"] and not info["lost"] and not trunc, (game, info["game_seed"])
            assert total == pytest.approx(info["score"]) and info["score"] == pytest.approx(1.0)
            assert info["expert_action"] is None  # the gold path is used up
    finally:
        env.close()


def test_menu_larger_than_max_menu_is_an_error_naming_max_menu():
    env = TextWorldExpressEnv(game="cookingworld", max_menu=8)
    try:
        with pytest.raises(MenuTooLarge, match=r"max_menu=8; pass max_menu=\d+ .*"
                                               r"menu_overflow='page'"):
            env.reset(seed=0)
    finally:
        env.close()


def test_paged_menus_never_exceed_max_menu_and_the_expert_still_wins():
    env = TextWorldExpressEnv(game="cookingworld", max_menu=12, menu_overflow="page",
                              menu_order="shuffled", expert=True)
    try:
        turns = 0
        for ep in range(2):
            _, info = env.reset(seed=ep)
            full = None
            for _ in range(400):
                assert len(info["menu"]) <= 12 and env.action_space.n == 12
                if info["menu_pages"] > 1:
                    assert info["menu"][-1] == PAGE_ACTION
                a = info["expert_action"]
                assert info["menu"][a] == info["expert_command"]
                before = info
                _, r, term, trunc, info = env.step(a)
                if before["expert_command"] == PAGE_ACTION:
                    turns += 1
                    assert r == 0.0 and not info["invalid_action"]
                    assert info["menu_page"] == (before["menu_page"] + 1) % before["menu_pages"]
                if term or trunc:
                    break
            assert info["won"], ep
        assert turns > 0
        # the page turn cycles through every action of the state exactly once
        _, info = env.reset(seed=5)
        seen = []
        for _ in range(info["menu_pages"]):
            seen += [a for a in info["menu"] if a != PAGE_ACTION]
            _, _, _, _, info = env.step(len(info["menu"]) - 1)
        assert info["menu_page"] == 0 and len(seen) == len(set(seen)) > 12
    finally:
        env.close()


# ---- folds, seeds, fingerprints ---------------------------------------------------------------


def test_official_folds_are_disjoint_and_reset_stays_in_its_fold():
    envs = {s: TextWorldExpressEnv(game="twc", split=s) for s in ("train", "valid", "test")}
    try:
        seeds = {s: set(e.seeds) for s, e in envs.items()}
        assert seeds["train"] == set(range(0, 1000))
        assert seeds["valid"] == set(range(10000, 11000))
        assert seeds["test"] == set(range(20000, 21000))
        assert not (seeds["train"] & seeds["valid"] or seeds["train"] & seeds["test"]
                    or seeds["valid"] & seeds["test"])
        assert {e.fold for e in envs.values()} == {"train", "dev", "test"}
        assert len({e.split_fingerprint for e in envs.values()}) == 3
        for s, env in envs.items():
            seen = set()
            for k in range(30):
                _, info = env.reset(seed=k)
                assert info["game_seed"] in seeds[s]
                assert info["seed_range"] == (min(seeds[s]), max(seeds[s]))
                seen.add(info["game_seed"])
            assert len(seen) > 20
            _, info = env.reset(options={"game": 5})
            assert info["game_seed"] == env.seeds[5] and info["game_index"] == 5
        with pytest.raises(ConfigError, match=r"not a seed of the train fold .*0\.\.999"):
            envs["train"].reset(options={"game_seed": 20001})
        _, info = envs["test"].reset(options={"game_seed": 20001})
        assert info["game_seed"] == 20001
        with pytest.raises(ConfigError, match="index 0..999"):
            envs["test"].reset(options={"game": 1000})
    finally:
        for e in envs.values():
            e.close()


def test_same_seed_same_game_and_fingerprint_depends_on_params(coin):
    a, ia = coin.reset(seed=7)
    b, ib = coin.reset(seed=7)
    assert a == b and ia["game_seed"] == ib["game_seed"] and ia["menu"] == ib["menu"]
    assert ia["game_params"] == "numLocations=4"
    fp = fold_fingerprint("1.1.0", "coin", "numLocations=4", "train", tuple(range(1000)))
    assert fp != fold_fingerprint("1.1.0", "coin", "numLocations=5", "train", tuple(range(1000)))
    assert fp != fold_fingerprint("1.1.0", "coin", "numLocations=4", "dev", tuple(range(1000)))
    assert len(fp) == 16 and fp == fold_fingerprint("1.1.0", "coin", "numLocations=4", "train",
                                                    tuple(range(1000)))


# ---- the menu contract ------------------------------------------------------------------------


def test_masked_index_is_an_invalid_move_and_out_of_space_raises(coin):
    obs, info = coin.reset(seed=3)
    n = len(info["menu"])
    assert info["action_mask"].sum() == n and info["action_mask"].shape == (64,)
    with pytest.raises(InvalidAction, match=r"Discrete\(64\)"):
        coin.step(64)
    with pytest.raises(InvalidAction):
        coin.step(-1)
    obs2, r, term, trunc, info2 = coin.step(n)  # masked: nothing sent to the game
    assert info2["invalid_action"] and info2["invalid_actions"] == 1 and r == 0.0
    assert obs2 == obs and info2["menu"] == info["menu"] and info2["moves"] == 1
    assert info2["expert_action"] == info["expert_action"]  # still on the gold path
    assert not (term or trunc)


def test_leaving_the_gold_path_makes_the_expert_none(coin):
    _, info = coin.reset(seed=4)
    wrong = next(i for i, a in enumerate(info["menu"]) if i != info["expert_action"])
    _, _, term, _, info = coin.step(wrong)
    if not term:
        assert info["expert_action"] is None and info["expert_command"] is None


def test_step_after_end_time_limit_and_penalty():
    with pytest.raises(ConfigError, match="TimeLimit"):  # the env counts no steps itself
        TextWorldExpressEnv(game="simonsays", max_episode_steps=2)
    env = gym.wrappers.TimeLimit(TextWorldExpressEnv(game="simonsays", expert=True,
                                                     invalid_action_penalty=-0.5), 2)
    try:
        _, info = env.reset(seed=0)
        _, r, term, trunc, info = env.step(len(info["menu"]))
        assert r == -0.5 and info["invalid_action"] and not trunc
        _, r, term, trunc, info = env.step(len(info["menu"]))
        assert trunc and not term
        _, info = env.reset(seed=0)
        wrong = next(i for i in range(len(info["menu"])) if i != info["expert_action"])
        _, r, term, trunc, info = env.step(wrong)  # Simon Says is lost on a wrong action
        assert term and info["lost"]
        with pytest.raises(ResetNeeded, match="reset"):
            env.step(0)
    finally:
        env.close()
    env = gym.make(ENV_ID, game="simonsays", max_episode_steps=3)  # gym's TimeLimit
    try:
        _, info = env.reset(seed=0)
        for _ in range(3):
            _, _, term, trunc, info = env.step(len(info["menu"]))
        assert trunc and not term
    finally:
        env.close()


def test_shuffle_same_seed_same_order_option_overrides_and_sorted_default():
    plain = TextWorldExpressEnv(game="cookingworld", max_menu=BIG, expert=True)
    shuf = TextWorldExpressEnv(game="cookingworld", max_menu=BIG, expert=True,
                               menu_order="shuffled")
    try:
        _, ip = plain.reset(seed=1)
        assert list(ip["menu"]) == sorted(ip["menu"])
        _, i1 = shuf.reset(seed=1)
        _, i2 = shuf.reset(seed=1)
        assert i1["menu"] == i2["menu"] and i1["menu_seed"] == 1
        assert sorted(i1["menu"]) == list(ip["menu"]) and list(i1["menu"]) != list(ip["menu"])
        _, i3 = shuf.reset(seed=1, options={"menu_seed": 2})  # same game, other order
        assert i3["game_seed"] == i1["game_seed"] and i3["menu"] != i1["menu"]
        assert sorted(i3["menu"]) == sorted(i1["menu"])
        # the expert's command is the same; its index follows the order
        assert i3["expert_command"] == i1["expert_command"] == ip["expert_command"]
        assert i3["menu"][i3["expert_action"]] == i1["menu"][i1["expert_action"]]
        # two episodes of a group (same reset seed) stay identical along a shared prefix
        shuf.reset(seed=1)
        a = [shuf.step(k)[4]["menu"] for k in (0, 1)]
        shuf.reset(seed=1)
        b = [shuf.step(k)[4]["menu"] for k in (0, 1)]
        assert a == b
    finally:
        plain.close()
        shuf.close()


# ---- vector envs ------------------------------------------------------------------------------


@pytest.mark.parametrize("vector", ["sync", "async"])
def test_vector_envs(vector):
    fns = [lambda: gym.make(ENV_ID, game="coin", game_params="numLocations=3", expert=True,
                            menu_order="shuffled") for _ in range(2)]
    before = _java_descendants()
    vec = (gym.vector.SyncVectorEnv(fns) if vector == "sync"
           else gym.vector.AsyncVectorEnv(fns, context="fork"))
    try:
        assert len(_java_descendants() - before) == 2  # one JVM per sub-env
        obs, infos = vec.reset(seed=[5, 5])
        assert str(obs[0]) == str(obs[1]) and str(obs[0]).startswith("Your task is to")
        won = np.zeros(2, dtype=bool)
        for _ in range(40):
            acts = np.array([infos["expert_action"][i] if infos["expert_action"][i] is not None
                             else 0 for i in range(2)])
            obs, r, term, trunc, infos = vec.step(acts)
            won |= np.asarray(term) & np.asarray(infos["won"], dtype=bool)
            if won.all():
                break
        assert won.all()
    finally:
        vec.close()
    deadline = time.monotonic() + 20
    while _java_descendants() - before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _java_descendants() - before  # no JVM left behind


# ---- errors that say what to do, JVM lifetime -------------------------------------------------


def test_bad_game_and_params_say_what_to_do():
    with pytest.raises(ConfigError, match="cookingworld, twc, coin"):
        TextWorldExpressEnv(game="zork")
    with pytest.raises(ConfigError, match="its parameters: numLocations, numDistractorItems"):
        TextWorldExpressEnv(game="coin", game_params={"numRooms": 3})
    with pytest.raises(ConfigError, match="not an integer"):
        TextWorldExpressEnv(game="coin", game_params="numLocations=abc")
    with pytest.raises(ConfigError, match="not name=value"):
        TextWorldExpressEnv(game="coin", game_params="numLocations")
    with pytest.raises(ConfigError, match="train, valid, test"):
        TextWorldExpressEnv(game="coin", split="dev")
    with pytest.raises(ConfigError, match="sorted, shuffled"):
        TextWorldExpressEnv(game="coin", menu_order="random")
    before = _java_children()
    with pytest.raises(ConfigError, match=r"less than or equal to 11.*accepted parameters"):
        TextWorldExpressEnv(game="coin", game_params={"numLocations": 99})  # checked by the game
    assert _java_children() == before  # the JVM started for the check was stopped


def test_canonical_params():
    assert canonical_params("coin", None) == canonical_params("coin", "") == ""
    assert canonical_params("coin", " numLocations = 3 , includeDoors=0,") == \
        "includeDoors=0,numLocations=3"
    assert canonical_params("coin", {"numLocations": 3, "includeDoors": False}) == \
        "includeDoors=0,numLocations=3"
    with pytest.raises(ConfigError, match="none"):
        canonical_params("arithmetic", {"level": 1})


def test_missing_java_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH without java
    with pytest.raises(JavaUnavailable, match="apt-get install -y openjdk-17-jre-headless"):
        TextWorldExpressEnv(game="coin")
    ok, why = java_status()
    assert not ok and "not on PATH" in why


def test_java_version_parsing_and_status():
    assert parse_java_version('openjdk version "17.0.15" 2025-04-15') == 17
    assert parse_java_version('java version "1.8.0_392"') == 8
    assert parse_java_version('openjdk version "21" 2023-09-19') == 21
    assert parse_java_version("no java here") is None
    ok, why = java_status()
    assert ok, why


def test_close_stops_the_jvm_and_is_idempotent():
    env = TextWorldExpressEnv(game="sorting")
    env.reset(seed=0)
    pid = env.java_pid
    assert pid is not None and _alive(pid)
    env.close()
    assert not _alive(pid) and env.java_pid is None
    env.close()
    with pytest.raises(GameError, match="after close"):
        env.reset(seed=0)


def test_a_forked_copy_closing_does_not_stop_the_parents_jvm():
    env = TextWorldExpressEnv(game="coin")
    try:
        env.reset(seed=0)
        pid = os.fork()
        if pid == 0:  # child: close its copy (and drop it), then leave without cleanup
            try:
                env.close()
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        assert _alive(env.java_pid)
        _, _, _, _, info = env.step(0)  # the parent's JVM still answers
        assert "menu" in info
    finally:
        env.close()


def _java_descendants() -> set[int]:
    """Live java processes started (directly or through workers) by this test process."""
    me, parent, java = os.getpid(), {}, set()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{d}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        parent[int(d)] = int(fields[1])
        if comm == "java" and fields[0] != "Z":
            java.add(int(d))
    out = set()
    for pid in java:
        p = pid
        while p > 1:
            p = parent.get(p, 1)
            if p == me:
                out.add(pid)
                break
    return out


def _java_children() -> set[int]:
    """Live java processes whose parent is this test process."""
    me, out = os.getpid(), set()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{d}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        if comm == "java" and int(fields[1]) == me and fields[0] != "Z":
            out.add(int(d))
    return out


def test_evaluate_plays_the_fold_with_one_menu_order_for_every_agent():
    """deciplane's evaluator on TextWorldExpress-v0: the expert wins every episode, a random
    agent does not, both on the same fingerprinted games and the same shuffled menus."""
    from deciplane.evaluation.evaluate import ExpertAgent, RandomAgent, evaluate_agent

    kw = {"game": "twc", "game_params": "numLocations=2,numItemsToPutAway=2",
          "menu_order": "shuffled"}
    exp = evaluate_agent(ENV_ID, ExpertAgent(), episodes=6, num_envs=2, env_kwargs=kw,
                         progress=False)
    rnd = evaluate_agent(ENV_ID, RandomAgent(0), episodes=6, env_kwargs=kw, progress=False)
    assert exp.success_rate == 1.0 and rnd.success_rate < 1.0
    assert exp.split_fingerprint == rnd.split_fingerprint
    assert [(e.task, e.seed) for e in exp.per_episode] == \
        [(e.task, e.seed) for e in rnd.per_episode]
    # the menu seed is the reset seed: episode i shows the same menus to every agent
    env = gym.make(ENV_ID, split="test", **kw)
    try:
        e0 = exp.per_episode[0]
        assert e0.task.startswith("twx-twc-test-s2")
        _, i1 = env.reset(seed=e0.seed, options={"task": 0})
        _, i2 = env.reset(seed=e0.seed, options={"task": 0})
        assert i1["game_name"] == e0.task and i1["menu_seed"] == e0.seed
        assert i1["menu"] == i2["menu"] and list(i1["menu"]) != sorted(i1["menu"])
    finally:
        env.close()


def test_text_mode_matches_commands_and_refuses_others():
    env = TextWorldExpressEnv(game="twc", game_params="numLocations=1,numItemsToPutAway=2",
                              action_mode="text", expert=True, invalid_action_penalty=-0.1)
    try:
        check_env(env, skip_render_check=True)
        obs, info = env.reset(seed=2)
        obs2, r, _, _, info2 = env.step("fly to the moon")
        assert info2["invalid_action"] and obs2 == obs and r == pytest.approx(-0.1)
        with pytest.raises(InvalidAction, match="command string"):
            env.step(3)
        done = False
        while not done:  # the expert's commands, shouted and spaced oddly, still match
            _, _, term, trunc, info = env.step("  " + info["expert_command"].upper() + " ")
            assert not info["invalid_action"]
            done = term or trunc
        assert info["won"]
    finally:
        env.close()
