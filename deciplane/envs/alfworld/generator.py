"""Offline generation of ALFWorld games (``game.tw-pddl`` + ``traj_data.json``).

Each game is an ALFWorld-format PDDL problem over ALFWorld's domain and vocabulary: a room
(kitchen, bathroom, bedroom, living room) with a random set of receptacles, objects placed
where they can be, and one goal of ALFWorld's six task types. Games are:

* **Deterministic by seed.** Candidate ``a`` for game ``i`` of a split is drawn from
  ``random.Random(f"deciplane-alfworld:{seed}:{split}:{i}:{a}")``; game ``i`` has task
  type ``TASK_TYPES[i % 6]`` (so every split is balanced over the six types).
* **Disjoint splits, by content hash.** A *layout* (room type + receptacle counts) is
  *unseen* when its hash says so (1 in 4 layouts); ``valid_unseen`` games use only
  unseen layouts, ``train``/``valid_seen`` only seen ones, and a seen-layout game belongs
  to ``valid_seen`` exactly when its own content hash says so (1 in 5), else to
  ``train``. Membership is a property of the game's content, so no game can be in two
  splits, whatever the numbers of games asked for.
* **Checked solvable.** The planner (fast-downward, through TextWorld's PDDL engine)
  must find a plan from the initial state, and replaying it must win the game; the plan
  is stored as the game's ``walkthrough``.
* **Cached like the TextWorld games.** ``deciplane_home()/games/alfworld/<key>/<split>/``
  holds one folder per game (ALFWorld's layout: ``game.tw-pddl`` and ``traj_data.json``),
  written atomically under an inter-process lock, and a manifest (``manifest-n<N>.json``,
  sha256 of every file) written last; readers of a complete split take no lock.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
from pathlib import Path
from typing import Any, Iterator, Sequence

from deciplane.envs.alfworld import vocab
from deciplane.envs.alfworld.pddl import (GOAL_TEMPLATES, TASK_TYPES, check_planner,
                                          domain_and_grammar, entity_names, with_goal)
from deciplane.errors import ConfigError, GameError
from deciplane.utils import (atomic_write_bytes, atomic_write_json, deciplane_home,
                             file_lock, fingerprint, sha256_file)

SPLITS = ("train", "valid_seen", "valid_unseen")
ALIASES = {"test": "valid_unseen", "valid": "valid_seen"}
# Bump when generated games change (invalidates caches).
GENERATOR_VERSION = 1
MAX_PLAN = 40            # longer expert plans are rejected (ALFWorld's are 5-30 steps)
MAX_ATTEMPTS = 400       # candidates per game before giving up
UNSEEN_LAYOUT_MOD = 4    # 1 in 4 layouts is held out for valid_unseen
VALID_SEEN_MOD = 5       # 1 in 5 seen-layout games is valid_seen


def resolve_split(split: str) -> str:
    """ALFWorld split name (``test`` -> ``valid_unseen``, ``valid`` -> ``valid_seen``)."""
    split = ALIASES.get(split, split)
    if split not in SPLITS:
        raise ConfigError(f"unknown ALFWorld split {split!r}; choose one of "
                          f"{', '.join(SPLITS)} (or test = valid_unseen, valid = valid_seen)")
    return split


# ---- one problem ---------------------------------------------------------------------------


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _rid(rtype: str, k: int) -> str:
    """PDDL id of receptacle ``k`` of ``rtype`` (sinks and tubs carry their basin, as in
    ALFRED: ``Sink_bar_1_bar_SinkBasin``)."""
    if rtype.endswith("Basin"):
        return f"{rtype[:-5]}_bar_{k}_bar_{rtype}"
    return f"{rtype}_bar_{k}"


def draw_layout(room: str, rng: random.Random) -> list[tuple[str, bool]]:
    """Receptacles of a room: ``[(type, openable), ...]`` with ALFWorld-like counts."""
    out = []
    for rtype, (openable, (lo, hi)) in sorted(vocab.ROOMS[room].items()):
        out += [(rtype, openable)] * rng.randint(lo, hi)
    return out


def layout_hash(room: str, layout: Sequence[tuple[str, bool]]) -> str:
    counts: dict[str, int] = {}
    for rtype, _ in layout:
        counts[rtype] = counts.get(rtype, 0) + 1
    return _hash(json.dumps([room, sorted(counts.items())]))


def layout_is_unseen(h: str) -> bool:
    return int(h[:12], 16) % UNSEEN_LAYOUT_MOD == 0


def game_split(layout_h: str, game_h: str) -> str:
    """The split a game belongs to, from its layout's and its own content hash."""
    if layout_is_unseen(layout_h):
        return "valid_unseen"
    return "valid_seen" if int(game_h[:12], 16) % VALID_SEEN_MOD == 0 else "train"


def draw_problem(task_type: str, rng: random.Random, unseen: bool) -> dict[str, Any] | None:
    """One candidate problem of ``task_type`` (``None`` if this draw cannot host it).

    Returns ``{"room", "layout_hash", "problem", "goal", "params"}``.
    """
    room = rng.choice(vocab.TASK_ROOMS[task_type])
    for _ in range(50):  # a layout of the wanted kind (seen / unseen)
        layout = draw_layout(room, rng)
        lh = layout_hash(room, layout)
        if layout_is_unseen(lh) == unseen:
            break
    else:
        return None
    rtypes = sorted({t for t, _ in layout})
    if task_type == "look_at_obj_in_light" and not set(rtypes) & set(vocab.LAMP_HOLDERS):
        return None
    receps: list[tuple[str, str, bool]] = []  # (id, type, openable)
    seen_k: dict[str, int] = {}
    for rtype, openable in layout:
        seen_k[rtype] = seen_k.get(rtype, 0) + 1
        receps.append((_rid(rtype, seen_k[rtype]), rtype, openable))

    kinds = [o for o, (rooms, holders, _) in sorted(vocab.OBJECTS.items())
             if room in rooms and holders & set(rtypes)]
    chosen = rng.sample(kinds, min(len(kinds), rng.randint(5, 9)))
    target_obj = _pick_target_object(task_type, chosen, rng)
    if target_obj is None:
        return None
    target_recep = None
    if task_type != "look_at_obj_in_light":
        options = [r for r in rtypes if r in vocab.OBJECTS[target_obj][1]
                   and r not in vocab.NOT_TARGETS
                   and not (task_type == "pick_cool_then_place_in_recep" and r == "Fridge")]
        if not options:
            return None
        target_recep = rng.choice(options)

    objects: list[tuple[str, str, str]] = []  # (id, type, receptacle id)
    for otype in chosen:
        n = rng.randint(1, 3)
        if otype == target_obj and task_type == "pick_two_obj_and_place":
            n = rng.randint(2, 3)
        holders = [r for r in receps if r[1] in vocab.OBJECTS[otype][1]
                   and not (otype == target_obj and r[1] == target_recep)]
        if not holders:
            return None
        for k in range(1, n + 1):
            objects.append((f"{otype}_bar_{k}", otype, rng.choice(holders)[0]))
    lamp = None
    if task_type == "look_at_obj_in_light":
        holders = [r for r in receps if r[1] in vocab.LAMP_HOLDERS]
        lamp = (f"{vocab.LAMP}_bar_1", vocab.LAMP, rng.choice(holders)[0])

    goal = GOAL_TEMPLATES[task_type].format(obj=target_obj.lower(),
                                            recep=(target_recep or "").lower(),
                                            toggle=vocab.LAMP.lower())
    problem = _problem_text(receps, objects, lamp, task_type, target_obj, target_recep)
    params = {"object_target": target_obj, "parent_target": target_recep or "",
              "toggle_target": vocab.LAMP if lamp else "", "mrecep_target": "",
              "object_sliced": False}
    return {"room": room, "layout_hash": lh, "problem": problem, "goal": goal,
            "params": params}


def _pick_target_object(task_type: str, chosen: list[str], rng: random.Random) -> str | None:
    need = {"pick_clean_then_place_in_recep": "c", "pick_heat_then_place_in_recep": "h",
            "pick_cool_then_place_in_recep": "k"}.get(task_type, "")
    options = [o for o in chosen if need in vocab.OBJECTS[o][2]] if need else list(chosen)
    return rng.choice(options) if options else None


def _problem_text(receps: list[tuple[str, str, bool]], objects: list[tuple[str, str, str]],
                  lamp: tuple[str, str, str] | None, task_type: str, target_obj: str,
                  target_recep: str | None) -> str:
    items = objects + ([lamp] if lamp else [])
    otypes = sorted({t for _, t, _ in items})
    rtypes = sorted({t for _, t, _ in receps})
    decl = ["agent1 - agent", "loc_bar_0 - location"]
    decl += [f"{t}Type - otype" for t in otypes] + [f"{t}Type - rtype" for t in rtypes]
    decl += [f"{i} - receptacle" for i, _, _ in receps] + [f"{i} - object" for i, _, _ in items]
    loc = {}
    for k, (rid, _, _) in enumerate(receps, start=1):
        loc[rid] = f"loc_bar_{k}"
        decl.append(f"loc_bar_{k} - location")
    init = ["(atLocation agent1 loc_bar_0)"]
    for rid, rtype, openable in receps:
        init += [f"(receptacleType {rid} {rtype}Type)", f"(receptacleAtLocation {rid} {loc[rid]})"]
        if openable:
            init.append(f"(openable {rid})")
    for oid, otype, rid in items:
        init += [f"(objectType {oid} {otype}Type)", f"(inReceptacle {oid} {rid})",
                 f"(objectAtLocation {oid} {loc[rid]})"]
        if otype == vocab.LAMP:
            init.append(f"(toggleable {oid})")
            continue
        init.append(f"(pickupable {oid})")
        props = vocab.OBJECTS[otype][2]
        init += [f"({p} {oid})" for flag, p in (("c", "cleanable"), ("h", "heatable"),
                                                  ("k", "coolable")) if flag in props]
    for rtype in rtypes:
        for otype in otypes:
            if otype != vocab.LAMP and rtype in vocab.OBJECTS[otype][1]:
                init.append(f"(canContain {rtype}Type {otype}Type)")
    goal = _goal_pddl(task_type, target_obj, target_recep)
    nl = "\n        "
    return (f"(define (problem alfworld_generated)\n    (:domain alfred)\n    (:objects\n"
            f"        {nl.join(decl)}\n    )\n    (:init\n        {nl.join(init)}\n    )\n"
            f"    (:goal\n        {goal}\n    )\n)\n")


def _goal_pddl(task_type: str, obj: str, recep: str | None) -> str:
    """ALFWorld's goal formulas (its goal library), for one object and receptacle type."""
    o, r = f"{obj}Type", f"{recep}Type"
    state = {"pick_clean_then_place_in_recep": "(cleanable ?o) (isClean ?o)",
             "pick_heat_then_place_in_recep": "(heatable ?o) (isHot ?o)",
             "pick_cool_then_place_in_recep": "(coolable ?o) (isCool ?o)"}
    if task_type == "look_at_obj_in_light":
        return ("(and (exists (?ot - object ?r - receptacle ?a - agent ?l - location) "
                f"(and (objectType ?ot {vocab.LAMP}Type) (toggleable ?ot) (isToggled ?ot) "
                "(receptacleAtLocation ?r ?l) (atLocation ?a ?l) (inReceptacle ?ot ?r))) "
                f"(exists (?o - object ?a - agent) (and (objectType ?o {o}) (holds ?a ?o))))")
    if task_type == "pick_two_obj_and_place":
        return ("(and (exists (?r - receptacle) (exists (?o1 - object) (and "
                f"(objectType ?o1 {o}) (receptacleType ?r {r}) (inReceptacle ?o1 ?r) "
                f"(exists (?o2 - object) (and (not (= ?o1 ?o2)) (objectType ?o2 {o}) "
                "(inReceptacle ?o2 ?r)))))))")
    extra = state.get(task_type, "")
    return ("(and (exists (?r - receptacle) (exists (?o - object) (and "
            f"(objectType ?o {o}) (receptacleType ?r {r}) {extra} (inReceptacle ?o ?r)))))"
            ).replace("  ", " ")


# ---- solving -------------------------------------------------------------------------------


def new_pddl_env(expert: bool = True) -> Any:
    """A TextWorld PDDL env asking for what deciplane uses."""
    check_planner()
    import textworld
    from textworld.envs.pddl import PddlEnv

    return PddlEnv(textworld.EnvInfos(admissible_commands=True, won=True,
                                      policy_commands=expert))


def load_game(env: Any, data: dict[str, Any]) -> None:
    """Load a game (its JSON dict) into ``env`` and give its entities ALFWorld's names."""
    env.load(data)
    names = entity_names(env._entity_infos)
    for key, info in env._entity_infos.items():
        info.name = names[key]


def solve(data: dict[str, Any], env: Any = None) -> list[str] | None:
    """The planner's plan for a game if replaying it wins, else ``None``."""
    env = env or new_pddl_env()
    load_game(env, data)
    state = env.reset()
    plan = list(state["policy_commands"] or [])
    if not plan or len(plan) > MAX_PLAN or state["won"]:
        return None
    asked = env.request_infos.policy_commands
    env.request_infos.policy_commands = False  # the replay needs no re-planning
    try:
        for command in plan:
            if command not in state["admissible_commands"]:
                return None
            state, _, _ = env.step(command)
    finally:
        env.request_infos.policy_commands = asked
    return plan if state["won"] else None


# ---- suites --------------------------------------------------------------------------------


def _split_dir(seed: int) -> Path:
    key = fingerprint({"generator": str(GENERATOR_VERSION), "seed": str(seed)})
    return deciplane_home() / "games" / "alfworld" / key


def generate_game(split: str, index: int, seed: int = 0, env: Any = None,
                  domain: str | None = None, grammar: str | None = None,
                  exclude: set[str] | frozenset[str] = frozenset()) -> dict[str, Any]:
    """Game ``index`` of ``split``: ``{"name", "game", "traj", "hash"}`` (not written)."""
    split = resolve_split(split)
    if domain is None or grammar is None:
        domain, grammar = domain_and_grammar()
    task_type = TASK_TYPES[index % len(TASK_TYPES)]
    for attempt in range(MAX_ATTEMPTS):
        rng = random.Random(f"deciplane-alfworld:{seed}:{split}:{index}:{attempt}")
        cand = draw_problem(task_type, rng, unseen=split == "valid_unseen")
        if cand is None:
            continue
        h = _hash(cand["problem"] + "\n" + cand["goal"])
        if game_split(cand["layout_hash"], h) != split or h in exclude:
            continue
        game = {"pddl_domain": domain, "grammar": with_goal(grammar, cand["goal"]),
                "pddl_problem": cand["problem"], "solvable": False, "walkthrough": None,
                "deciplane": {"task_type": task_type, "goal": cand["goal"],
                              "room": cand["room"], "layout_hash": cand["layout_hash"],
                              "content_hash": h, "split": split,
                              "generator_version": GENERATOR_VERSION}}
        plan = solve(game, env)
        if plan is None:
            continue
        game["solvable"], game["walkthrough"] = True, plan
        traj = {"task_type": task_type, "pddl_params": cand["params"],
                "scene": {"room_type": cand["room"]},
                "turk_annotations": {"anns": [{"task_desc": cand["goal"]}]}}
        name = f"{task_type}-{split}-{index:04d}-{h[:8]}"
        return {"name": name, "game": game, "traj": traj, "hash": h}
    raise GameError(f"could not generate a solvable {task_type} game for {split} #{index} "
                    f"in {MAX_ATTEMPTS} draws; this is a bug in the vocabulary tables")


def make_alfworld_suite(split: str = "train", n_games: int = 60, *, seed: int = 0,
                        progress: bool = False) -> dict[str, Any]:
    """The manifest of ``n_games`` generated games of ``split`` (generated once, cached).

    The manifest lists each game's folder (``game.tw-pddl`` + ``traj_data.json``), task
    type, goal, content hash and file hashes, and the split's ``fingerprint``.
    """
    split = resolve_split(split)
    n = int(n_games)
    if not 1 <= n <= 20_000:
        raise ConfigError(f"n_games must be in 1..20000, got {n_games}")
    folder = _split_dir(seed) / split
    manifest_path = folder / f"manifest-n{n}.json"
    manifest = _load_manifest(manifest_path)
    if manifest is not None:
        return manifest
    with file_lock(deciplane_home() / "games" / "alfworld" / ".generate.lock"):
        manifest = _load_manifest(manifest_path)  # another process may have finished it
        if manifest is not None:
            return manifest
        entries = _generate(split, n, seed, folder, progress)
        manifest = {"source": "generated", "split": split, "n_games": n, "seed": seed,
                    "generator_version": GENERATOR_VERSION, "games": entries,
                    "task_type_counts": _counts(entries),
                    "fingerprint": _fingerprint(entries)}
        atomic_write_json(manifest_path, manifest)
    manifest = _load_manifest(manifest_path)
    assert manifest is not None
    return manifest


def _generate(split: str, n: int, seed: int, folder: Path, progress: bool) -> list[dict[str, Any]]:
    domain, grammar = domain_and_grammar()
    env = None
    entries: list[dict[str, Any]] = []
    seen: set[str] = set()
    with _progress(progress, n, split) as tick:
        for i in range(n):
            existing = _existing(folder, split, i)
            if existing is not None and existing["content_hash"] not in seen:
                entry = existing
            else:
                env = env or new_pddl_env()
                g = generate_game(split, i, seed, env, domain, grammar, exclude=seen)
                entry = _write(folder, g)
            seen.add(entry["content_hash"])
            entries.append(entry)
            tick()
    return entries


def _existing(folder: Path, split: str, index: int) -> dict[str, Any] | None:
    """The entry of game ``index`` if an intact copy is already in the cache."""
    task_type = TASK_TYPES[index % len(TASK_TYPES)]
    for d in sorted(folder.glob(f"{task_type}-{split}-{index:04d}-*")):
        try:
            return _entry(d)
        except (OSError, ValueError, KeyError):
            continue
    return None


def _write(folder: Path, g: dict[str, Any]) -> dict[str, Any]:
    d = folder / g["name"]
    d.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(d / "traj_data.json", json.dumps(g["traj"], indent=1, sort_keys=True).encode())
    atomic_write_bytes(d / "game.tw-pddl", json.dumps(g["game"], sort_keys=True).encode())
    return _entry(d)


def _entry(d: Path) -> dict[str, Any]:
    game = json.loads((d / "game.tw-pddl").read_text())
    meta = game["deciplane"]
    if not game.get("solvable"):
        raise ValueError("not solvable")
    return {"name": d.name, "folder": d.name, "task_type": meta["task_type"],
            "goal": meta["goal"], "room": meta["room"], "content_hash": meta["content_hash"],
            "layout_hash": meta["layout_hash"], "walkthrough_length": len(game["walkthrough"]),
            "sha256": sha256_file(d / "game.tw-pddl"),
            "traj_sha256": sha256_file(d / "traj_data.json")}


def _load_manifest(path: Path) -> dict[str, Any] | None:
    """The manifest at ``path`` if it and every game it lists are intact."""
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text())
        for g in manifest["games"]:
            d = path.parent / g["folder"]
            if (sha256_file(d / "game.tw-pddl") != g["sha256"]
                    or sha256_file(d / "traj_data.json") != g["traj_sha256"]):
                return None  # corrupt cache entry: regenerate (deterministic) under the lock
    except (OSError, ValueError, KeyError, TypeError):
        return None
    manifest["root"] = str(path.parent)
    return manifest


def _counts(entries: Sequence[dict[str, Any]]) -> dict[str, int]:
    return {t: sum(e["task_type"] == t for e in entries) for t in TASK_TYPES}


def _fingerprint(entries: Sequence[dict[str, Any]]) -> str:
    return fingerprint({e["name"]: f"{e['sha256']}:{e['traj_sha256']}" for e in entries})


@contextlib.contextmanager
def _progress(enabled: bool, total: int, split: str) -> Iterator[Any]:
    if not enabled:
        yield lambda: None
        return
    from rich.progress import Progress

    with Progress(transient=True) as bar:
        task = bar.add_task(f"generating {total} ALFWorld game(s) ({split})", total=total)
        yield lambda: bar.advance(task)
