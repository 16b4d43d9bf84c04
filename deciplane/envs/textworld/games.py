"""Offline TextWorld game suites: generated once with ``tw-make``, cached, fingerprinted.

A *suite* is the list of games of one split (``train``/``valid``/``test``) of one preset
(``tw-simple``, ``tw-coin_collector``, ``tw-treasure_hunter``, ``tw-cooking``,
``custom``) with fixed generation options, or of the built-in ``embedded`` mix.

* **Deterministic by seed.** Game ``i`` of a split is ``tw-make PRESET --seed S`` with
  ``S = seed * 100_000 + SPLIT_OFFSET[split] + i``; the three splits draw from disjoint
  seed ranges (and, where the preset has one, from TextWorld's own held-out distribution:
  ``tw-cooking --split``, ``tw-simple --test``). Inform7 stamps the compile date into the
  story file's serial number; it is reset to ``000000`` so the same seed gives the same
  bytes on any day, and generation runs with ``PYTHONHASHSEED=0`` so the game's ``.json``
  is byte-stable too.
* **Generated once, reused.** Games live under
  ``deciplane_home()/games/<preset>/<options-hash>/<split>/``; a later call (with the same
  or a smaller ``n_games``) generates nothing. A larger ``n_games`` generates only the
  missing games.
* **Safe under concurrency.** Generation holds an inter-process lock and moves finished
  files into place with atomic renames (``.json`` first, ``.z8`` last); the split's
  manifest is written last, atomically. Readers of a complete suite take no lock.
* **Fingerprinted.** Each split has a manifest (``manifest-n<N>.json``) with the sha256 of
  every file; :func:`deciplane.utils.fingerprint` of it identifies the exact games an
  evaluation ran on.

Generation runs tw-make itself (the installed ``tw-make`` script, executed in a worker
process that imports TextWorld once for many games).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

from deciplane.errors import ConfigError, GameError, UnknownPreset
from deciplane.utils import (atomic_write_json, deciplane_home, file_lock, fingerprint,
                             sha256_file)

SPLITS = ("train", "valid", "test")
SPLIT_OFFSET = {"train": 0, "valid": 30_000, "test": 60_000}
MAX_GAMES_PER_SPLIT = 30_000
EMBEDDED = "embedded"
# Bump when the way games are generated or post-processed changes (invalidates caches).
GENERATOR_VERSION = 2
SERIAL = b"000000"

# Options each preset accepts (tw-make's own flags, with "-" spelled "_"), and the
# defaults deciplane uses. ``None`` = tw-make's default; booleans are tw-make flags.
PRESETS: dict[str, dict[str, Any]] = {
    "tw-simple": {"rewards": "dense", "goal": "detailed"},
    "tw-coin_collector": {"level": 1},
    "tw-treasure_hunter": {"level": 1},
    "tw-cooking": {"recipe": 1, "take": 1, "go": 1, "open": False, "cook": False,
                   "cut": False, "drop": False, "recipe_seed": None},
    "custom": {"world_size": 3, "nb_objects": 6, "quest_length": 3, "quest_breadth": None,
               "nb_parallel_quests": None, "theme": None, "include_adj": False,
               "blend_descriptions": False, "ambiguous_instructions": False,
               "only_last_action": False, "blend_instructions": False,
               "entity_numbering": False, "quest_min_length": None,
               "quest_max_length": None, "quest_min_breadth": None,
               "quest_max_breadth": None, "quest_min_depth": None, "quest_max_depth": None},
}

# The built-in mix: small, varied, generated in well under a minute, all won by the
# expert. (preset, games per split, options)
EMBEDDED_MIX: tuple[tuple[str, int, dict[str, Any]], ...] = (
    ("tw-coin_collector", 2, {"level": 2}),
    ("tw-treasure_hunter", 2, {"level": 2}),
    ("tw-cooking", 1, {"recipe": 1, "take": 1, "go": 1}),
    ("tw-simple", 1, {"rewards": "dense", "goal": "detailed"}),
)


@dataclass(frozen=True)
class GameSuite:
    """The games of one split, their manifest and its fingerprint."""

    paths: tuple[Path, ...]
    manifest: Mapping[str, Any] = field(repr=False)
    fingerprint: str

    def __len__(self) -> int:
        return len(self.paths)

    @property
    def names(self) -> list[str]:
        return [p.stem for p in self.paths]


def available_presets() -> list[str]:
    """Preset names accepted by :func:`make_game_suite` (tw-make presets + ``embedded``)."""
    return [*PRESETS, EMBEDDED]


def make_game_suite(preset: str = EMBEDDED, split: str = "train", n_games: int | None = None,
                    *, seed: int = 0, progress: bool = False, **options: Any) -> GameSuite:
    """Return the games of ``split`` for ``preset``, generating (once) what is missing.

    ``n_games`` defaults to 10 for a preset and to the mix's own sizes for ``embedded``
    (where it is not accepted). ``options`` are tw-make flags of the preset (see
    :data:`PRESETS`); ``seed`` shifts the whole seed range (a different family of games).
    """
    _check_split(split)
    if preset == EMBEDDED:
        if n_games is not None or options:
            raise ConfigError("the 'embedded' suite has fixed sizes and options; pass a "
                              f"preset ({', '.join(PRESETS)}) to choose n_games/options")
        _prefetch([(p, resolve_options(p, o), split, n, seed) for p, n, o in EMBEDDED_MIX],
                  progress)
        parts = [make_game_suite(p, split, n, seed=seed, progress=progress, **opts)
                 for p, n, opts in EMBEDDED_MIX]
        return combine_suites(parts, name=EMBEDDED, split=split)
    opts = resolve_options(preset, options)
    n = 10 if n_games is None else int(n_games)
    if not 1 <= n <= MAX_GAMES_PER_SPLIT:
        raise ConfigError(f"n_games must be in 1..{MAX_GAMES_PER_SPLIT}, got {n_games}")
    folder = _suite_dir(preset, opts, seed) / split
    manifest_path = folder / f"manifest-n{n}.json"
    suite = _load_suite(manifest_path)
    if suite is not None:
        return suite
    with file_lock(deciplane_home() / "games" / ".generate.lock"):
        suite = _load_suite(manifest_path)  # another process may have finished it
        if suite is not None:
            return suite
        entries = _generate_split(preset, opts, split, n, seed, folder, progress)
        manifest = {
            "preset": preset, "split": split, "n_games": n, "seed": seed, "options": opts,
            "generator_version": GENERATOR_VERSION, "textworld_version": _textworld_version(),
            "games": entries,
        }
        manifest["fingerprint"] = _manifest_fingerprint(entries)
        atomic_write_json(manifest_path, manifest)
    suite = _load_suite(manifest_path)
    assert suite is not None
    return suite


def combine_suites(parts: Sequence[GameSuite], name: str, split: str) -> GameSuite:
    """One suite made of several (e.g. the embedded mix); fingerprint over all games."""
    entries = [g for s in parts for g in s.manifest["games"]]
    manifest = {"preset": name, "split": split, "n_games": len(entries),
                "parts": [dict(s.manifest, games=None) for s in parts], "games": entries}
    manifest["fingerprint"] = _manifest_fingerprint(entries)
    return GameSuite(tuple(p for s in parts for p in s.paths), manifest,
                     manifest["fingerprint"])


def suite_from_paths(paths: Iterable[str | os.PathLike]) -> GameSuite:
    """A suite of user-provided ``.z8`` games (each with its TextWorld ``.json``), checked."""
    resolved = []
    for p in paths:
        path = Path(p).expanduser().resolve()
        check_game_file(path)
        resolved.append(path)
    if not resolved:
        raise ConfigError("games=[] is empty; pass at least one .z8 path or a preset name "
                          f"({', '.join(available_presets())})")
    entries = [_entry(p, seed=None) for p in resolved]
    manifest = {"preset": "files", "split": None, "n_games": len(entries), "games": entries}
    manifest["fingerprint"] = _manifest_fingerprint(entries)
    return GameSuite(tuple(resolved), manifest, manifest["fingerprint"])


def resolve_options(preset: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """Preset defaults overlaid with ``options``; unknown presets/options are errors."""
    if preset not in PRESETS:
        raise UnknownPreset(f"unknown game preset {preset!r}; available: "
                            f"{', '.join(available_presets())} (or a list of .z8 paths)")
    allowed = PRESETS[preset]
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ConfigError(f"preset {preset!r} has no option(s) {unknown}; allowed: "
                          f"{', '.join(sorted(allowed))} (tw-make {preset} --help)")
    out = dict(allowed)
    out.update(options)
    return {k: v for k, v in sorted(out.items()) if v is not None and v is not False}


# ---- checks ---------------------------------------------------------------------------


def check_game_file(path: Path) -> None:
    """Raise :class:`GameError` unless ``path`` is a readable, uncorrupted TextWorld game:
    a Z-machine story whose header checksum matches, with its ``.json`` next to it."""
    if not path.is_file():
        raise GameError(f"game file {str(path)!r} does not exist; pass paths to .z8 files "
                        "made by tw-make, or a preset name "
                        f"({', '.join(available_presets())})")
    if path.suffix != ".z8":
        raise GameError(f"{str(path)!r} is not a .z8 story file; deciplane plays TextWorld "
                        "games compiled to Z-machine v8 (tw-make ... --format z8)")
    problem = z8_problem(path.read_bytes())
    if problem:
        raise GameError(f"game file {str(path)!r} is corrupt ({problem}); regenerate it "
                        "with tw-make (or delete it from the deciplane cache)")
    meta = path.with_suffix(".json")
    if not meta.is_file():
        raise GameError(f"{str(path)!r} has no {meta.name} next to it; TextWorld needs the "
                        "game's .json (written by tw-make) to list the admissible actions")
    try:
        with open(meta, "rb") as fh:
            data = json.load(fh)
        if not isinstance(data, dict) or "world" not in data:
            raise ValueError("not a TextWorld game description")
    except (ValueError, UnicodeDecodeError) as e:
        raise GameError(f"{str(meta)!r} is corrupt ({e}); regenerate the game with "
                        "tw-make") from None


def z8_problem(data: bytes) -> str:
    """Empty if ``data`` looks like an intact Z-machine v8 story, else what is wrong.

    Checks the version byte, the declared length and the header checksum (sum of all
    bytes after the 64-byte header, mod 2**16), as the Z-machine ``verify`` opcode does.
    """
    if len(data) < 64:
        return f"{len(data)} bytes, shorter than a Z-machine header"
    if data[0] != 8:
        return f"Z-machine version byte is {data[0]}, expected 8"
    declared = int.from_bytes(data[0x1A:0x1C], "big") * 8
    if declared == 0 or declared > len(data):
        return f"header declares {declared} bytes but the file has {len(data)}"
    checksum = int.from_bytes(data[0x1C:0x1E], "big")
    if sum(memoryview(data)[64:declared]) & 0xFFFF != checksum:
        return "header checksum does not match the contents"
    return ""


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise ConfigError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")


# ---- cache ----------------------------------------------------------------------------


def _suite_dir(preset: str, opts: Mapping[str, Any], seed: int) -> Path:
    key = fingerprint({"options": json.dumps(opts, sort_keys=True), "seed": str(seed),
                       "generator": str(GENERATOR_VERSION)})
    return deciplane_home() / "games" / preset / key


def _load_suite(manifest_path: Path) -> GameSuite | None:
    """The suite described by ``manifest_path`` if it and all its games are intact."""
    if not manifest_path.is_file():
        return None
    try:
        manifest = json.loads(manifest_path.read_text())
        paths = tuple(manifest_path.parent / g["file"] for g in manifest["games"])
    except (ValueError, KeyError, TypeError):
        return None
    for p, g in zip(paths, manifest["games"]):
        if not (p.is_file() and p.with_suffix(".json").is_file()):
            return None
        if sha256_file(p) != g["sha256"] or sha256_file(p.with_suffix(".json")) != g["json_sha256"]:
            return None  # corrupt cache entry: regenerate (deterministic) under the lock
    return GameSuite(paths, manifest, manifest["fingerprint"])


def _manifest_fingerprint(entries: Sequence[Mapping[str, Any]]) -> str:
    """Fingerprint of the games' names and file hashes (a repeated name, e.g. two
    ``game.z8`` from different folders, is keyed ``game#2``, so no game drops out)."""
    items: dict[str, str] = {}
    for g in entries:
        key, k = g["name"], 1
        while key in items:
            k += 1
            key = f"{g['name']}#{k}"
        items[key] = f"{g['sha256']}:{g['json_sha256']}"
    return fingerprint(items)


def _entry(path: Path, seed: int | None) -> dict[str, Any]:
    meta = json.loads(path.with_suffix(".json").read_text())
    walkthrough = (meta.get("metadata") or {}).get("walkthrough") or []
    return {"name": path.stem, "file": path.name, "seed": seed,
            "sha256": sha256_file(path), "json_sha256": sha256_file(path.with_suffix(".json")),
            "walkthrough_length": len(walkthrough)}


def _game_name(preset: str, split: str, seed: int) -> str:
    return f"{preset}-{split}-s{seed}"


def _split_settings(preset: str, split: str) -> dict[str, Any]:
    """Use TextWorld's own held-out distributions where the preset has them."""
    if preset == "tw-cooking":
        return {"split": split}
    if preset == "tw-simple" and split == "test":
        return {"test": True}
    return {}


def _generate_split(preset: str, opts: Mapping[str, Any], split: str, n: int, seed: int,
                    folder: Path, progress: bool) -> list[dict[str, Any]]:
    """Make sure games 0..n-1 of the split exist in ``folder`` (identical games within a
    split are replaced by the next seeds) and return their manifest entries."""
    folder.mkdir(parents=True, exist_ok=True)
    base = seed * 100_000 + SPLIT_OFFSET[split]
    entries: list[dict[str, Any]] = []
    seen: set[str] = set()
    i = 0
    while len(entries) < n:
        want = [base + k for k in range(i, i + n - len(entries))]
        i += len(want)
        if i > MAX_GAMES_PER_SPLIT:
            raise GameError(f"could not find {n} distinct {preset} games for split {split!r}"
                            f" with options {dict(opts)}; ask for fewer games or harder "
                            "options (e.g. a higher level)")
        missing = [s for s in want if not _complete(folder, _game_name(preset, split, s))]
        if missing:
            args = {**opts, **_split_settings(preset, split)}
            jobs = [(_game_name(preset, split, s), _tw_make_argv(preset, args, s), folder)
                    for s in missing]
            run_tw_make(jobs, progress=progress)
        for s in want:
            entry = _entry(folder / (_game_name(preset, split, s) + ".z8"), seed=s)
            if entry["sha256"] in seen:
                continue  # the same game twice: skip it, the next seed replaces it
            seen.add(entry["sha256"])
            entries.append(entry)
    return entries


def _prefetch(specs: Sequence[tuple[str, dict[str, Any], str, int, int]], progress: bool) -> None:
    """Generate the first-choice games of several suites in one batch of workers (one
    TextWorld start-up per worker instead of one per suite)."""
    jobs = []
    for preset, opts, split, n, seed in specs:
        folder = _suite_dir(preset, opts, seed) / split
        if (folder / f"manifest-n{n}.json").is_file():
            continue
        base = seed * 100_000 + SPLIT_OFFSET[split]
        args = {**opts, **_split_settings(preset, split)}
        for s in range(base, base + n):
            name = _game_name(preset, split, s)
            if not _complete(folder, name):
                jobs.append((name, _tw_make_argv(preset, args, s), folder))
    if jobs:
        with file_lock(deciplane_home() / "games" / ".generate.lock"):
            jobs = [j for j in jobs if not _complete(j[2], j[0])]
            run_tw_make(jobs, progress=progress)


def _complete(folder: Path, name: str) -> bool:
    """Whether ``name`` is in ``folder`` intact (else it is generated again)."""
    try:
        check_game_file(folder / f"{name}.z8")
    except GameError:
        return False
    return True


def _tw_make_argv(preset: str, opts: Mapping[str, Any], seed: int) -> list[str]:
    argv = [preset]
    for key, value in sorted(opts.items()):
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is not False and value is not None:
            argv += [flag, str(value)]
    return argv + ["--seed", str(seed), "--silent", "-f"]


def _textworld_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("textworld")
    except metadata.PackageNotFoundError:  # pragma: no cover
        return "unknown"


def tw_make_path() -> Path:
    """The installed ``tw-make`` script (from textworld's package metadata, else PATH)."""
    from importlib import metadata

    try:
        for f in metadata.distribution("textworld").files or ():
            if f.name == "tw-make":
                p = Path(f.locate()).resolve()
                if p.is_file():
                    return p
    except metadata.PackageNotFoundError:
        pass
    found = shutil.which("tw-make") or str(Path(sys.executable).parent / "tw-make")
    if not Path(found).is_file():
        raise GameError("tw-make (TextWorld's game generator) is not installed; "
                        "pip install textworld")
    return Path(found)


# ---- generation -------------------------------------------------------------------------


def run_tw_make(jobs: Sequence[tuple[str, list[str], Path]], *,
                progress: bool = False, workers: int | None = None) -> None:
    """Run ``tw-make`` for each ``(name, argv, folder)`` and move ``name.z8``/``name.json``
    into ``folder`` atomically. Jobs are spread over a few worker processes, each of which
    imports TextWorld once."""
    if not jobs:
        return
    n_workers = workers or max(1, min(os.cpu_count() or 1, 4, math.ceil(len(jobs) / 3)))
    tmp_names = [f"{i:05d}-{name}" for i, (name, _, _) in enumerate(jobs)]  # unique
    named = [(t, argv) for t, (_, argv, _) in zip(tmp_names, jobs)]
    chunks = [named[k::n_workers] for k in range(n_workers)]
    root = deciplane_home() / "games"
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix=".gen-") as tmp:
        procs = [_start_worker(chunk, Path(tmp), k) for k, chunk in enumerate(chunks) if chunk]
        failures: list[dict[str, str]] = []
        try:
            with _progress(progress, len(jobs)) as tick:
                for proc in procs:
                    assert proc.stdout is not None
                    for line in proc.stdout:
                        if line.startswith("done "):
                            tick()
                        elif line.startswith("fail "):
                            failures.append(json.loads(line[5:]))
                    proc.wait()
                    if proc.returncode not in (0, 3):
                        log = Path(proc.args[-1])  # type: ignore[index]
                        failures.append({"name": f"worker (exit {proc.returncode})",
                                         "error": log.read_text(errors="replace")[-2000:]})
        finally:  # interrupted (Ctrl-C): stop the workers before their folder goes away
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                if proc.stdout:
                    proc.stdout.close()
        if failures:
            f = failures[0]
            name = f["name"][6:] if f["name"][:5].isdigit() else f["name"]  # drop "00003-"
            raise GameError(f"tw-make failed for {name}: {f['error'].strip()}\n"
                            "Check the preset options (tw-make <preset> --help).")
        for tmp_name, (name, _, folder) in zip(tmp_names, jobs):
            folder.mkdir(parents=True, exist_ok=True)
            src = Path(tmp) / tmp_name
            _postprocess(src.with_suffix(".z8"), name)
            os.replace(src.with_suffix(".json"), folder / f"{name}.json")
            os.replace(src.with_suffix(".z8"), folder / f"{name}.z8")


def _start_worker(jobs: list[tuple[str, list[str]]], out: Path, k: int) -> subprocess.Popen:
    """A worker process; its stderr goes to a file (a full pipe could block it)."""
    root = str(Path(__file__).resolve().parents[3])  # so the worker imports this deciplane
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, PYTHONHASHSEED="0", PYTHONPATH=path)
    log = out / f"worker-{k}.log"
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "deciplane.envs.textworld.games", "--worker",
             str(tw_make_path()), str(out), str(log)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(jobs))
    proc.stdin.close()
    return proc


def _postprocess(z8: Path, name: str) -> None:
    """Make the output independent of when and where it was generated: reset Inform7's
    compile-date serial number (header bytes 0x12-0x17, outside the checksummed area),
    replace the temporary output path some presets record in the .json by the game's
    final file name, and drop the .ni source."""
    data = bytearray(z8.read_bytes())
    data[0x12:0x18] = SERIAL
    z8.write_bytes(bytes(data))
    meta = z8.with_suffix(".json")
    text = meta.read_text()
    if str(z8) in text:
        text = text.replace(str(z8), f"{name}.z8")
    # The knowledge base records where textworld is installed (used only to generate new
    # text, never to play): keep the part below site-packages so the file, and so the
    # split fingerprint, is the same on every machine.
    text = re.sub(r'"text_grammars_path": "[^"]*/(textworld/[^"]*)"',
                  r'"text_grammars_path": "\1"', text)
    meta.write_text(text)
    with contextlib.suppress(FileNotFoundError):
        z8.with_suffix(".ni").unlink()


@contextlib.contextmanager
def _progress(enabled: bool, total: int) -> Iterator[Any]:
    if not enabled:
        yield lambda: None
        return
    from rich.progress import Progress

    with Progress(transient=True) as bar:
        task = bar.add_task(f"generating {total} TextWorld game(s) with tw-make", total=total)
        yield lambda: bar.advance(task)


def _worker_main(tw_make: str, out: str) -> int:
    """Worker process: run tw-make in-process for each job read from stdin."""
    import io
    import runpy
    import time

    jobs = json.loads(sys.stdin.read())
    status = 0
    for name, argv in jobs:
        sys.argv = ["tw-make", *argv, "--output", str(Path(out) / f"{name}.z8")]
        err = io.StringIO()
        t0 = time.perf_counter()
        try:
            with contextlib.redirect_stdout(sys.stderr), contextlib.redirect_stderr(err):
                runpy.run_path(tw_make, run_name="__main__")
        except SystemExit as e:
            if e.code not in (0, None):
                print("fail " + json.dumps({"name": name, "error": err.getvalue()}), flush=True)
                status = 3
                continue
        except Exception as e:  # noqa: BLE001 - reported to the parent with the game name
            print("fail " + json.dumps({"name": name, "error": f"{type(e).__name__}: {e}"}),
                  flush=True)
            status = 3
            continue
        print(f"done {name} {time.perf_counter() - t0:.2f}", flush=True)
    return status


if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "--worker":
    sys.exit(_worker_main(sys.argv[2], sys.argv[3]))
