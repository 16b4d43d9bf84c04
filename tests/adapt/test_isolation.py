"""Gold isolation: what an adapter can reach holds no gold answer."""

from __future__ import annotations

import dataclasses
import gc
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

from deciplane.adapt import Adapter
from deciplane.agents import load_policy
from deciplane.envs import load_benchmark
from deciplane.methods.tasco import TASCO
from deciplane.methods.ttpo import TTPO
from deciplane.methods.ttrl import TTRL, TTRLConfig
from deciplane.types import UnlabeledTask

ROOT = Path(__file__).resolve().parents[2]


class CheatingAdapter:
    """Looks everywhere it can for answers: gc objects and what they reference, the live
    stack frames, the environment variables, the tasks."""

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def _add(self, x) -> None:
        if isinstance(x, str):
            self.seen.add(x.strip())
        elif isinstance(x, bytes):
            self.seen.add(x.decode("utf-8", "replace").strip())

    def _walk(self, obj) -> None:
        kind = type(obj)
        if kind in (str, bytes):
            self._add(obj)
        elif kind is dict:
            for k, v in list(obj.items()):
                self._add(k)
                self._add(v)
        elif kind in (list, tuple, set, frozenset):
            for v in list(obj):
                self._add(v)
        else:
            try:
                attrs = list(object.__getattribute__(obj, "__dict__").values())
            except Exception:  # no __dict__, or a proxy that refuses
                attrs = []
            for v in attrs:
                self._add(v)

    def run(self, tasks: list[UnlabeledTask]) -> dict[str, str]:
        # every gc-tracked object, plus what it references directly (CPython does not
        # track dicts/tuples holding only atoms such as strings, so reach them this way)
        for obj in gc.get_objects():
            self._walk(obj)
            try:
                refs = gc.get_referents(obj)
            except Exception:
                refs = []
            for r in refs:
                if type(r) in (str, bytes, dict, list, tuple, set, frozenset) and not gc.is_tracked(r):
                    self._walk(r)
        # the live call stacks (running frames are not gc objects): every local variable
        for frame in sys._current_frames().values():
            while frame is not None:
                for v in list(frame.f_locals.values()):
                    self._walk(v)
                    if type(v) not in (str, bytes):
                        try:
                            for r in gc.get_referents(v):
                                self._walk(r)
                        except Exception:
                            pass
                frame = frame.f_back
        for k, v in os.environ.items():
            self._add(k)
            self._add(v)
        for t in tasks:
            for name in dir(t):
                if not name.startswith("__"):
                    self._add(getattr(t, name, None))
            for k, v in t.meta.items():
                self._add(k)
                self._add(str(v))
        return {t.id: "" for t in tasks}


def _gold_in_subprocess(name: str, split: str, limit: int) -> list[str]:
    code = ("import json; from deciplane.benchmarks import load_labeled\n"
            f"print(json.dumps([it.gold for it in load_labeled({name!r}, {split!r}, limit={limit})[0]]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_tasks_expose_only_id_prompt_meta():
    assert [f.name for f in dataclasses.fields(UnlabeledTask)] == ["id", "prompt", "meta"]
    tasks, scorer = load_benchmark("arith-shift", "test", limit=5)
    with scorer:
        for t in tasks:
            assert not {"gold", "answer", "solution", "label"} & {k.lower() for k in t.meta}
        assert scorer.pid != os.getpid()


def test_adapter_api_has_no_path_to_the_scorer():
    for cls in (TTRL, TTPO, TASCO):
        assert list(inspect.signature(cls.__init__).parameters) == ["self", "policy", "config", "progress"]
        # tasks, plus the run directory the adapter logs and checkpoints to (no scorer there)
        assert list(inspect.signature(cls.run).parameters) == ["self", "tasks", "run_dir"]
    assert isinstance(CheatingAdapter(), Adapter)


def test_cheating_adapter_finds_no_gold_after_a_real_adaptation(tiny_settings):
    tasks, scorer = load_benchmark("mmath-en", "test", limit=120)
    with scorer:
        policy = load_policy("deciplane/tiny")
        adapted = TTRL(policy, TTRLConfig(**{**tiny_settings, "max_steps": 1}))
        answers = adapted.run(tasks[:4])            # a real run in this process first
        canary = {"planted": "\\frac{" + "%d}{%d}" % (7731, 9)}   # positive control
        cheat = CheatingAdapter()
        cheat.run(tasks)
        seen = cheat.seen
        assert answers and len(seen) > 10_000      # it really walked the heap
        assert canary["planted"] in seen           # and would have found a gold string
        report = scorer.score(answers)              # scoring works while the scorer lives
        assert report.count == 120
    # gold is read only now, in another process, after the walk
    gold = _gold_in_subprocess("mmath-en", "test", 120)
    distinctive = [g for g in gold if len(g) >= 4 and not g.replace(",", "").isdigit()]
    assert len(distinctive) >= 5, gold
    assert not [g for g in distinctive if g in seen]
