"""The held-out scorer: gold answers live only in the scorer's own process.

``load_benchmark(name, split)`` starts one child process (``python -c``, talking over two
private pipes). The child loads the benchmark *with* gold, keeps the gold, and sends
back only ``(id, prompt, meta)`` per task and the split fingerprint; every later request
(``score``, ``label_accuracy``, ``reward_accuracy``, ``sample_accuracy``) sends
predictions in and gets correctness/aggregates out. The caller never holds a gold
string, not even while loading, and ``scorer.pid != os.getpid()``.

Threat model
------------
Protects against (the realistic failure modes of adaptation/evaluation code):

* accidental leaks: gold in task objects, in ``meta``, in a cached dataset, in logs or
  in a config that the adapter can read;
* an adapter that walks ``gc.get_objects()``, module globals, ``os.environ`` or the task
  objects looking for answers (none of them hold gold; nor does the scorer object,
  which only holds pipe ends and the child's pid);
* answer-set probing through the API: only known task ids are scored (unknown ids are an
  error), and per-task results come back only for the answers you submit.

Does *not* protect against a deliberately malicious adapter running as the same user:
it can ``ptrace`` the scorer or read ``/proc/<pid>/mem``, read the benchmark files on
disk (``mmath/en.json``), re-run the procedural ``arith`` generator, or call
``score()`` repeatedly to search answers (each call is scored honestly). Defending
against that needs a separate user/machine; the goal here is that honest code cannot
see gold *by accident*, and that a cheat must be deliberate and visible in the code.

The child exits when the caller does (it watches its parent pid and the request pipe),
on :meth:`HeldOutScorer.close`, or on garbage collection of the scorer.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import time
import weakref
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Mapping, Sequence

from deciplane.errors import InvalidAnswer, ScorerError
from deciplane.types import UnlabeledTask

STARTUP_TIMEOUT_S = 300.0
_PKG_ROOT = str(Path(__file__).resolve().parents[3])  # the folder holding deciplane/


# ------------------------------------------------------------------------ reports --

@dataclass
class ScoreReport:
    """Held-out result of one set of answers over a whole split.

    ``accuracy = n_correct / count`` over *all* tasks of the split: a missing answer
    (id absent or ``None``) is wrong and listed in ``missing``."""

    benchmark: str
    split: str
    split_fingerprint: str
    count: int
    n_correct: int
    accuracy: float
    correct: dict[str, bool]
    missing: list[str]

    @property
    def n_missing(self) -> int:
        return len(self.missing)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        return (f"{self.benchmark}/{self.split}: accuracy {self.accuracy:.3f} "
                f"({self.n_correct}/{self.count}, {self.n_missing} missing) "
                f"fingerprint {self.split_fingerprint}")


@dataclass
class LabelReport:
    """How often pseudo-labels (e.g. majority votes) equal the gold.

    ``accuracy`` is over labelled tasks (label not ``None``); ``coverage`` is the
    fraction of submitted tasks that had a label."""

    count: int
    n_labelled: int
    n_correct: int
    accuracy: float
    coverage: float
    correct: dict[str, bool]
    split_fingerprint: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RewardReport:
    """Agreement between pseudo-rewards and true rewards over individual samples.

    ``accuracy``: fraction of samples with ``(pseudo_reward > 0.5) == correct``;
    ``false_positive``: pseudo 1 but wrong; ``false_negative``: pseudo 0 but right."""

    n_samples: int
    accuracy: float
    false_positive: int
    false_negative: int
    true_positive: int
    true_negative: int
    split_fingerprint: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SampleReport:
    """Correctness of several samples per task: ``mean`` = sampled pass@1 averaged over
    the submitted tasks, ``pass_any`` = fraction with at least one right sample."""

    n_tasks: int
    n_samples: int
    mean: float
    pass_any: float
    per_task: dict[str, float] = field(default_factory=dict)
    split_fingerprint: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------- child side --

class _GoldBook:
    """The child's state: gold per task id, and a memo of verification results."""

    def __init__(self, name: str, split: str, limit: int | None,
                 params: dict[str, Any] | None = None) -> None:
        from deciplane.benchmarks.data import load_judge, load_labeled, lookup

        items, self.fingerprint = load_labeled(name, split, limit, **(params or {}))
        self.name, self.split = name, split
        self.order = [it.id for it in items]
        self.gold = {it.id: it for it in items}
        self._judge = load_judge(lookup(name))
        self.public = [(it.id, it.prompt, dict(it.meta)) for it in items]
        self.memo: dict[tuple[str, str], bool] = {}

    def _unknown(self, ids) -> None:
        bad = [i for i in ids if i not in self.gold]
        if bad:
            raise ScorerError(
                f"{len(bad)} task id(s) are not in {self.name}/{self.split}, e.g. "
                f"{', '.join(map(repr, bad[:3]))}; use the ids of the tasks returned by "
                "load_benchmark for this split")

    def judge(self, pairs: Sequence[tuple[str, str | None]]) -> list[bool]:
        todo = [(tid, a) for tid, a in pairs if a is not None and (tid, a) not in self.memo]
        todo = list(dict.fromkeys(todo))
        results = self._judge([(a, self.gold[tid]) for tid, a in todo]) if todo else []
        self.memo.update(zip(todo, results))
        return [a is not None and self.memo[(tid, a)] for tid, a in pairs]

    def score(self, answers: Mapping[str, str | None]) -> ScoreReport:
        self._unknown(answers)
        present = [(tid, answers[tid]) for tid in self.order
                   if tid in answers and answers[tid] is not None]
        ok = dict(zip((t for t, _ in present), self.judge(present)))
        correct = {tid: ok.get(tid, False) for tid in self.order}
        missing = [tid for tid in self.order if answers.get(tid) is None]
        n = len(self.order)
        k = sum(correct.values())
        return ScoreReport(self.name, self.split, self.fingerprint, n, k,
                           k / n if n else 0.0, correct, missing)

    def label_accuracy(self, labels: Mapping[str, str | None]) -> LabelReport:
        self._unknown(labels)
        labelled = [(tid, a) for tid, a in labels.items() if a is not None]
        correct = dict(zip((t for t, _ in labelled), self.judge(labelled)))
        k, m = sum(correct.values()), len(labelled)
        return LabelReport(count=len(labels), n_labelled=m, n_correct=k,
                           accuracy=k / m if m else 0.0,
                           coverage=m / len(labels) if labels else 0.0,
                           correct=correct, split_fingerprint=self.fingerprint)

    def reward_accuracy(self, samples: Mapping[str, Sequence[tuple[str | None, float]]]
                        ) -> RewardReport:
        self._unknown(samples)
        flat = [(tid, a, float(r)) for tid, lst in samples.items() for a, r in lst]
        truth = self.judge([(tid, a) for tid, a, _ in flat])
        tp = fp = tn = fn = 0
        for (_, _, r), t in zip(flat, truth):
            p = r > 0.5
            tp += p and t
            fp += p and not t
            tn += (not p) and (not t)
            fn += (not p) and t
        n = len(flat)
        return RewardReport(n, (tp + tn) / n if n else 0.0, fp, fn, tp, tn, self.fingerprint)

    def sample_accuracy(self, samples: Mapping[str, Sequence[str | None]]) -> SampleReport:
        self._unknown(samples)
        flat = [(tid, a) for tid, lst in samples.items() for a in lst]
        truth = iter(self.judge(flat))
        per_task = {}
        anyright = 0
        for tid, lst in samples.items():
            vals = [next(truth) for _ in lst]
            per_task[tid] = sum(vals) / len(vals) if vals else 0.0
            anyright += any(vals)
        n = len(samples)
        return SampleReport(n_tasks=n, n_samples=len(flat),
                            mean=sum(per_task.values()) / n if n else 0.0,
                            pass_any=anyright / n if n else 0.0, per_task=per_task,
                            split_fingerprint=self.fingerprint)


def _watch_parent(ppid: int) -> None:
    while True:
        time.sleep(0.5)
        if os.getppid() != ppid:
            os._exit(0)


_METHODS = ("score", "label_accuracy", "reward_accuracy", "sample_accuracy")


def _child_main(req_fd: int, resp_fd: int, ppid: int) -> None:
    """Scorer process: load gold, send the public tasks, then answer requests."""
    threading.Thread(target=_watch_parent, args=(ppid,), daemon=True).start()
    req, resp = Connection(req_fd, writable=False), Connection(resp_fd, readable=False)
    try:
        name, split, limit, params = req.recv()
        book = _GoldBook(name, split, limit, params)
    except Exception as exc:
        resp.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    resp.send(("ok", (book.public, book.fingerprint)))
    book.public = []
    while True:
        try:
            msg = req.recv()
        except (EOFError, OSError):
            return
        method, arg = msg
        if method == "close":
            resp.send(("ok", None))
            return
        try:
            if method not in _METHODS:
                raise ScorerError(f"unknown scorer request {method!r}")
            resp.send(("ok", getattr(book, method)(arg)))
        except ScorerError as exc:
            resp.send(("error", str(exc)))
        except Exception as exc:  # report, keep serving
            resp.send(("error", f"scorer failed: {type(exc).__name__}: {exc}"))


# -------------------------------------------------------------------- caller side --

def _kill(proc: subprocess.Popen, conns: Sequence[Connection]) -> None:
    for c in conns:
        try:
            c.close()
        except OSError:
            pass
    if proc.poll() is None:
        proc.kill()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover
        pass


def _check_answers(answers: Any, what: str, allow_lists: bool = False) -> dict:
    """Validate a ``{task_id: answer}`` mapping in the caller (clear errors before
    anything crosses the pipe)."""
    from deciplane.envs.math.verify import check_text

    if not isinstance(answers, Mapping):
        raise InvalidAnswer(f"{what} must be a dict {{task_id: answer}}, got "
                            f"{type(answers).__name__}")
    out = {}
    for tid, a in answers.items():
        if not isinstance(tid, str):
            raise ScorerError(f"task ids are str, got {tid!r}; use UnlabeledTask.id")
        if allow_lists:
            out[tid] = list(a)
            continue
        out[tid] = None if a is None else check_text(a, f"answer for {tid!r}")
    return out


class HeldOutScorer:
    """Scores answers against gold that lives only in this object's child process.

    Use via :func:`deciplane.envs.load_benchmark`. Thread-safe (requests are
    serialised). A context manager; :meth:`close` stops the child. See the module
    docstring for the threat model."""

    def __init__(self, benchmark: str, split: str, limit: int | None = None,
                 **params: Any) -> None:
        self.benchmark, self.split, self.limit = benchmark, split, limit
        self.params = dict(params)
        self._lock = threading.RLock()
        req_r, req_w = os.pipe()
        resp_r, resp_w = os.pipe()
        code = (f"import sys; sys.path.insert(0, {_PKG_ROOT!r}); "
                "from deciplane.benchmarks.scorer import _child_main; "
                f"_child_main({req_r}, {resp_w}, {os.getpid()})")
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        try:
            self._proc = subprocess.Popen([sys.executable, "-c", code],
                                          pass_fds=(req_r, resp_w), env=env,
                                          stdin=subprocess.DEVNULL, close_fds=True)
        finally:
            os.close(req_r)
            os.close(resp_w)
        self._req = Connection(req_w, readable=False)
        self._resp = Connection(resp_r, writable=False)
        self._finalizer = weakref.finalize(self, _kill, self._proc, (self._req, self._resp))
        try:
            public, self.split_fingerprint = self._call_raw((benchmark, split, limit, self.params),
                                                            STARTUP_TIMEOUT_S)
        except BaseException:
            self.close()
            raise
        self._tasks = [UnlabeledTask(tid, prompt, meta) for tid, prompt, meta in public]

    # -- plumbing --
    @property
    def pid(self) -> int:
        """Process id of the scorer process (never the caller's)."""
        return self._proc.pid

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def _call_raw(self, msg: Any, timeout_s: float | None = None) -> Any:
        with self._lock:
            if self.closed:
                raise ScorerError("the scorer is closed; call load_benchmark(...) again")
            try:
                self._req.send(msg)
                deadline = None if timeout_s is None else time.monotonic() + timeout_s
                while not self._resp.poll(1.0):
                    if self._proc.poll() is not None:
                        raise EOFError
                    if deadline is not None and time.monotonic() > deadline:
                        self._finalizer()
                        raise ScorerError(f"the scorer did not answer within {timeout_s:.0f}s")
                kind, payload = self._resp.recv()
            except (EOFError, OSError, BrokenPipeError):
                self.close()
                raise ScorerError(
                    f"the scorer process {self._proc.pid} died (exit code "
                    f"{self._proc.poll()}); call load_benchmark(...) again") from None
        if kind == "error":
            raise ScorerError(payload)
        return payload

    def close(self) -> None:
        """Stop the scorer process (idempotent)."""
        if self._finalizer.alive:
            try:
                with self._lock:
                    self._req.send(("close", None))
                    if self._resp.poll(2.0):
                        self._resp.recv()
            except (OSError, EOFError):
                pass
            self._finalizer()

    def __enter__(self) -> "HeldOutScorer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"pid={self.pid}"
        return (f"HeldOutScorer({self.benchmark!r}, {self.split!r}, n={len(self._tasks)}, "
                f"fingerprint={self.split_fingerprint}, {state})")

    def __reduce__(self):
        raise TypeError("a HeldOutScorer cannot be pickled (its gold stays in its own "
                        "process); pass answers back to the process that created it")

    # -- public API --
    def tasks(self) -> list[UnlabeledTask]:
        """The split's tasks (id, prompt, meta), in the split's order."""
        return list(self._tasks)

    def __len__(self) -> int:
        return len(self._tasks)

    def score(self, answers: Mapping[str, str | None]) -> ScoreReport:
        """Score ``{task_id: final answer}`` (a bare answer or a whole response; math-
        verify extraction applies). Missing ids and ``None`` count as wrong and are
        listed; ids not in the split raise :class:`ScorerError`; non-text answers raise
        :class:`InvalidAnswer`."""
        return self._call_raw(("score", _check_answers(answers, "answers")))

    def label_accuracy(self, labels: Mapping[str, str | None]) -> LabelReport:
        """How often pseudo-labels (e.g. the majority vote per task) are right; a
        ``None`` label means "no valid vote" and only lowers ``coverage``."""
        return self._call_raw(("label_accuracy", _check_answers(labels, "labels")))

    def reward_accuracy(self, samples: Mapping[str, Sequence[tuple[str | None, float]]]
                        ) -> RewardReport:
        """Agreement of per-sample pseudo-rewards with the true rewards:
        ``{task_id: [(answer, pseudo_reward), ...]}``."""
        checked = _check_answers(samples, "samples", allow_lists=True)
        from deciplane.envs.math.verify import check_text
        for tid, lst in checked.items():
            checked[tid] = [(None if a is None else check_text(a, f"answer for {tid!r}"),
                             float(r)) for a, r in lst]
            if any(math.isnan(r) for _, r in checked[tid]):
                raise InvalidAnswer(f"pseudo-reward for {tid!r} is NaN")
        return self._call_raw(("reward_accuracy", checked))

    def sample_accuracy(self, samples: Mapping[str, Sequence[str | None]]) -> SampleReport:
        """Per-task fraction of right samples (sampled pass@1) and pass@any:
        ``{task_id: [answer, ...]}``."""
        checked = _check_answers(samples, "samples", allow_lists=True)
        from deciplane.envs.math.verify import check_text
        for tid, lst in checked.items():
            checked[tid] = [None if a is None else check_text(a, f"answer for {tid!r}")
                            for a in lst]
        return self._call_raw(("sample_accuracy", checked))


__all__ = ["HeldOutScorer", "ScoreReport", "LabelReport", "RewardReport", "SampleReport"]
