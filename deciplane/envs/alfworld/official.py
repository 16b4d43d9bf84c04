"""The official ALFWorld games, when the user has them (``$ALFWORLD_DATA``).

ALFWorld's data (``alfworld-download``) lays its text games out as
``$ALFWORLD_DATA/json_2.1.1/{train,valid_seen,valid_unseen}/<task>/<trial>/`` with a
``traj_data.json`` (task type, goal parameters, annotations) and a ``game.tw-pddl``
(PDDL domain, grammar, problem, ``solvable``) in each trial folder. This module finds
them, checks each one and writes a manifest per split: the file hashes, the count of
games per task type, the put-command version of the games (see
:data:`deciplane.envs.alfworld.pddl.COMMAND_STYLES`) and every game left out with the
reason. ALFWorld's own loader skips the same games (movable-receptacle and sliced tasks,
unsolvable or missing games) silently; here each one is named.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator

from deciplane.envs.alfworld.pddl import TASK_TYPES, GameData
from deciplane.errors import ConfigError, GameError
from deciplane.utils import atomic_write_json, deciplane_home, fingerprint, sha256_file

SPLITS = ("train", "valid_seen", "valid_unseen")
DATA_VERSION = "json_2.1.1"
# Games per split in ALFWorld's release (after its own filtering of task types).
EXPECTED_COUNTS = {"train": 3553, "valid_seen": 140, "valid_unseen": 134}
MANIFEST_VERSION = 1


def data_root(data_dir: str | os.PathLike | None = None) -> Path | None:
    """``data_dir`` or ``$ALFWORLD_DATA`` if it holds ``json_2.1.1/<split>`` folders."""
    raw = data_dir if data_dir is not None else os.environ.get("ALFWORLD_DATA")
    if not raw:
        return None
    root = Path(raw).expanduser()
    if (root / DATA_VERSION).is_dir() and any((root / DATA_VERSION / s).is_dir() for s in SPLITS):
        return root
    return None


def describe(data_dir: str | os.PathLike | None = None) -> dict[str, Any]:
    """What ``deciplane doctor`` says about the official data (cheap: reads a few files)."""
    root = data_root(data_dir)
    if root is None:
        where = data_dir or os.environ.get("ALFWORLD_DATA")
        return {"present": False, "where": str(where) if where else None}
    out: dict[str, Any] = {"present": True, "where": str(root), "splits": {}}
    styles: dict[str, int] = {}
    for split in SPLITS:
        games = list(_trial_dirs(root / DATA_VERSION / split))
        out["splits"][split] = len(games)
        for d in games[:3]:  # the version of a few games is enough to name it
            try:
                style = GameData.read(d / "game.tw-pddl").style
                styles[style] = styles.get(style, 0) + 1
            except GameError:
                continue
    out["command_styles"] = styles
    return out


def _trial_dirs(split_dir: Path) -> Iterator[Path]:
    if not split_dir.is_dir():
        return
    for dirpath, _, files in sorted(os.walk(split_dir)):
        if "traj_data.json" in files or "game.tw-pddl" in files:
            yield Path(dirpath)


def official_manifest(split: str, data_dir: str | os.PathLike | None = None,
                      verify: bool = False, progress: bool = False) -> dict[str, Any]:
    """Scan one split of the official data and return (and cache) its manifest.

    Every trial folder is checked: both files present and readable, a known task type,
    ``solvable`` true, a grammar whose put-command version is known; with
    ``verify=True`` each game is also loaded by TextWorld's PDDL engine. Games that fail
    are listed under ``"skipped"`` with the reason; they are never played. The manifest
    is cached under ``deciplane_home()/alfworld-official/`` keyed by the folders' paths,
    sizes and modification times.
    """
    if split not in SPLITS:
        raise ConfigError(f"unknown ALFWorld split {split!r}; choose one of {', '.join(SPLITS)}")
    root = data_root(data_dir)
    if root is None:
        raise GameError("no official ALFWorld data: set ALFWORLD_DATA to the folder that "
                        f"holds {DATA_VERSION}/{{train,valid_seen,valid_unseen}} (made by "
                        "alfworld-download), or use source='generated'")
    split_dir = root / DATA_VERSION / split
    dirs = list(_trial_dirs(split_dir))
    stamp = {}
    for d in dirs:
        for name in ("traj_data.json", "game.tw-pddl"):
            p = d / name
            st = p.stat() if p.exists() else None
            stamp[str(p)] = f"{st.st_size}:{st.st_mtime_ns}" if st else "missing"
    key = fingerprint({**stamp, "_verify": str(verify), "_v": str(MANIFEST_VERSION)})
    cache = deciplane_home() / "alfworld-official" / f"{split}-{key}.json"
    if cache.is_file():
        try:
            return json.loads(cache.read_text())
        except ValueError:
            pass
    games, skipped = [], []
    env = None
    for d in _progress_iter(dirs, progress, split):
        rel = str(d.relative_to(split_dir))
        reason, entry = _check(d, rel)
        if reason is None and verify:
            try:
                from deciplane.envs.alfworld.generator import load_game, new_pddl_env

                env = env or new_pddl_env(expert=False)
                load_game(env, dict(json.loads((d / "game.tw-pddl").read_text())))
                env.reset()
            except Exception as e:  # noqa: BLE001 - anything the PDDL engine raises
                reason = f"does not load in TextWorld's PDDL engine ({type(e).__name__}: {e})"
        if reason is None:
            games.append(entry)
        else:
            skipped.append({"folder": rel, "reason": reason})
    counts = {t: sum(g["task_type"] == t for g in games) for t in TASK_TYPES}
    styles: dict[str, int] = {}
    for g in games:
        styles[g["command_style"]] = styles.get(g["command_style"], 0) + 1
    manifest = {
        "source": "official", "data_version": DATA_VERSION, "root": str(split_dir),
        "split": split, "n_games": len(games), "expected_n_games": EXPECTED_COUNTS[split],
        "verified_load": verify, "task_type_counts": counts, "command_styles": styles,
        "games": games, "skipped": skipped,
        "fingerprint": fingerprint({g["folder"]: f"{g['sha256']}:{g['traj_sha256']}"
                                    for g in games}),
    }
    atomic_write_json(cache, manifest)
    return manifest


def _check(d: Path, rel: str) -> tuple[str | None, dict[str, Any]]:
    """``(reason it is left out or None, manifest entry)`` for one trial folder."""
    if "movable" in rel or "Sliced" in rel:
        return "movable-receptacle and sliced tasks are not text games in ALFWorld", {}
    traj_path, game_path = d / "traj_data.json", d / "game.tw-pddl"
    if not traj_path.is_file():
        return "no traj_data.json", {}
    if not game_path.is_file():
        return "no game.tw-pddl (run alfworld-generate on this folder)", {}
    try:
        traj = json.loads(traj_path.read_text())
    except (OSError, ValueError, UnicodeDecodeError) as e:
        return f"traj_data.json is not readable JSON ({e})", {}
    if not isinstance(traj, dict) or traj.get("task_type") not in TASK_TYPES:
        return (f"task type {traj.get('task_type') if isinstance(traj, dict) else None!r} is "
                f"not one of ALFWorld's six ({', '.join(TASK_TYPES)})"), {}
    try:
        game = GameData.read(game_path, traj)
    except GameError as e:
        return str(e), {}
    if game.data.get("solvable") is not True:
        return ("marked unsolvable" if game.data.get("solvable") is False
                else "has no 'solvable' flag (never checked by alfworld-generate)"), {}
    return None, {"name": rel.replace(os.sep, "/"), "folder": rel, "task_type": game.task_type,
                  "goal": game.goal, "command_style": game.style,
                  "sha256": sha256_file(game_path), "traj_sha256": sha256_file(traj_path)}


def _progress_iter(items: list[Path], enabled: bool, split: str) -> Iterator[Path]:
    if not enabled:
        yield from items
        return
    from rich.progress import Progress

    with Progress(transient=True) as bar:
        task = bar.add_task(f"checking {len(items)} ALFWorld {split} games", total=len(items))
        for item in items:
            yield item
            bar.advance(task)


def doctor_lines() -> list[str]:
    """What ``deciplane doctor`` prints about ALFWorld: the packages, the planner, whether
    the official data is present and which version's put-command template it uses."""
    from deciplane.envs.alfworld.pddl import COMMAND_STYLES, alfworld_version

    lines = [f"alfworld package: {alfworld_version()}"]
    try:
        import fast_downward  # noqa: F401

        lines.append("ALFWorld planner (fast-downward-textworld): yes")
    except ImportError:
        lines.append("ALFWorld planner (fast-downward-textworld): no (pip install "
                     "fast-downward-textworld)")
    d = describe()
    if not d["present"]:
        where = f" ({d['where']} has no {DATA_VERSION}/)" if d["where"] else " (ALFWORLD_DATA unset)"
        lines.append(f"ALFWorld official data: no{where}; source='auto' uses generated games")
    else:
        counts = ", ".join(f"{s} {n}" for s, n in d["splits"].items())
        styles = ", ".join(COMMAND_STYLES[s] for s in sorted(d["command_styles"])) or "unknown"
        lines.append(f"ALFWorld official data: yes, {d['where']} ({counts} trial folders); "
                     f"command templates: {styles}")
    return lines
