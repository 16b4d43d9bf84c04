"""Baselines kept across runs: one store (:class:`BaselineStore`), two kinds of key.

A baseline — what the untrained model does — costs the same in every run that shares
what it depends on, so it is kept in a folder of JSON files, one per key, written
atomically (a run killed while writing leaves the old file or none; an unreadable file is
computed again):

* a training run's zero-shot evaluations (``eval.cache_baselines``), keyed by
  :func:`baseline_key`, in ``$DECIPLANE_HOME/baselines/KEY.json`` (below);
* an adaptation run's baseline *answers* (greedy, majority vote: model outputs, never
  gold), keyed by the model, the data and the generation settings
  (:mod:`deciplane.adapt.runner`), in ``RUN_DIR/baselines/baselines-NAME-KEY.json`` or
  the folder ``--baseline-cache`` names.

A training run's zero-shot baselines — RLiD's labels readout on the untrained model, and the
untrained policy itself (``before``) — cost the same in every run of a config: the
demo's labels pass alone is ~350 s of a 28-minute run. They depend only on what the key
below holds, so a second run reads them from ``$DECIPLANE_HOME/baselines/`` instead:

* the **weights**: a digest of every parameter and buffer of the model as evaluated
  (name, dtype, shape, bytes) — the base model, the trunk dtype it runs in and the
  untrained head / adapters alike (LoRA's random ``A`` is covered too);
* the **agent**: its class and settings (readout, history, greedy, temperature, labels)
  and a digest of the token ids of a fixed probe prompt it builds (the prompt template);
* the **episodes**: env id, its keyword arguments (observation view, menu order, game
  settings), episode cap, split, split fingerprint and the episode seeds;
* the **code**: deciplane's version and a digest of the sources that decide what an
  episode does (agents, envs, the episode loop).

An entry holds the evaluation's result (with per-episode wins, lengths, returns and
invalid steps) and the seconds per episode it took, so that the time plan can use it when
the cached evaluation is the first one. A run cut by its time plan stores the episodes it
played; a later run can use a prefix of them (:func:`cut_evaluation`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

from deciplane.engine.episodes import episodes_of, summarize_episodes
from deciplane.utils import atomic_write_json, deciplane_home

CODE_DIRS = ("agents", "envs", "sandbox", "benchmarks", "engine/episodes.py",
             "trainers/env_suite.py")
"""Sources (under the package) whose digest is part of every key."""

_code_digest: str | None = None


def weights_fingerprint(model: torch.nn.Module) -> str:
    """A digest of every parameter and buffer of ``model`` (name, dtype, shape, bytes)."""
    h = hashlib.blake2b(digest_size=16)
    for name, t in sorted(model.state_dict().items()):
        t = t.detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def code_fingerprint() -> str:
    """deciplane's version and a digest of the sources in :data:`CODE_DIRS` (cached)."""
    global _code_digest
    if _code_digest is None:
        import deciplane

        root = Path(deciplane.__file__).resolve().parent
        h = hashlib.blake2b(digest_size=16)
        h.update(str(getattr(deciplane, "__version__", "")).encode())
        for part in CODE_DIRS:
            p = root / part
            for f in sorted(p.rglob("*.py")) if p.is_dir() else [p]:
                h.update(str(f.relative_to(root)).encode())
                h.update(f.read_bytes())
        _code_digest = h.hexdigest()
    return _code_digest


def agent_fingerprint(agent: Any) -> dict[str, Any]:
    """The agent's class, settings and the digest of a fixed probe prompt it builds."""
    settings = {k: getattr(agent, k, None) for k in
                ("readout", "history", "greedy", "temperature", "top_p", "dedup", "labels",
                 "cue", "system_prompt", "max_new_tokens", "stop")}
    out: dict[str, Any] = {"class": type(agent).__name__,
                           "settings": json.loads(json.dumps(settings, default=str))}
    from deciplane.types import Menu

    probe = ("Probe observation: a room with a door.", Menu(("open door", "go east", "look")),
             [("Earlier.", "look")])
    if callable(getattr(agent, "_encode", None)):          # MenuAgent: the token ids
        text = str(torch.as_tensor(agent._encode(*probe)[0]).tolist())
    elif callable(getattr(agent, "prompt", None)):         # TextAgent: the prompt text
        text = agent.prompt(*probe)
    else:
        raise TypeError(f"{type(agent).__name__} builds no prompt the cache can check")
    out["prompt"] = hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
    return out


def baseline_key(kind: str, agent: Any, weights: str, env: dict[str, Any],
                 split: str, fingerprint: str | None, seeds: Sequence[int]) -> str:
    """The cache key of a baseline evaluation (see the module doc); ``weights`` is the
    model's :func:`weights_fingerprint`."""
    blob = json.dumps({"kind": kind, "weights": weights,
                       "agent": agent_fingerprint(agent), "env": env, "split": split,
                       "split_fingerprint": fingerprint, "seeds": [int(s) for s in seeds],
                       "code": code_fingerprint()}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


@dataclass(frozen=True)
class BaselineStore:
    """A folder of baselines, ``FOLDER/KEY.json`` each (the folder is made on the first
    write)."""

    folder: Path

    def load(self, key: str) -> dict[str, Any] | None:
        """The stored entry, or None when there is none (or it is torn or not a dict)."""
        f = Path(self.folder) / f"{key}.json"
        if not f.is_file():
            return None
        try:
            entry = json.loads(f.read_text())
        except (OSError, json.JSONDecodeError):   # a torn or foreign file: recompute
            return None
        return entry if isinstance(entry, dict) else None

    def store(self, key: str, entry: dict[str, Any]) -> None:
        atomic_write_json(Path(self.folder) / f"{key}.json", entry)


def cache_dir() -> Path:
    """The training runs' store: ``$DECIPLANE_HOME/baselines``."""
    return deciplane_home() / "baselines"


def load_baseline(key: str) -> dict[str, Any] | None:
    """The cached entry ``{"result", "s_per_episode", ...}`` or None."""
    entry = BaselineStore(cache_dir()).load(key)
    return entry if entry is not None and "result" in entry else None


def store_baseline(key: str, result: dict[str, Any], wall_s: float, **meta: Any) -> None:
    n = max(1, int(result.get("episodes", 0) or 0))
    BaselineStore(cache_dir()).store(
        key, {"result": result, "s_per_episode": wall_s / n, "wall_s": wall_s, **meta})


def cut_evaluation(result: dict[str, Any], n: int) -> dict[str, Any]:
    """``result`` restricted to its first ``n`` episodes (metrics recomputed)."""
    if n >= int(result["episodes"]):
        return result
    return summarize_episodes(result["episode_seeds"], episodes_of(result)[:n],
                              result.get("split_fingerprint"))


__all__ = ["BaselineStore", "agent_fingerprint", "baseline_key", "cache_dir", "code_fingerprint",
           "cut_evaluation", "load_baseline", "store_baseline", "weights_fingerprint"]
