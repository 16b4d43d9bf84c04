"""Math answer equivalence with `math-verify`, safe in threads and worker processes.

``math_verify.parse`` / ``math_verify.verify`` bound their own run time with
``signal.alarm``. That only works in the main thread of the main interpreter: called
from a thread it raises inside the library, which catches the error and silently
answers "no match" — every reward becomes 0. It also steals the process's ``SIGALRM``.

Here the library never runs in the caller's process. :func:`verify_math` sends the
pair to a small pool of persistent worker processes (``python -c`` children talking
over private pipes, started on first use) and waits with a deadline; a worker that
misses its deadline is killed (SIGKILL) and replaced, and the answer counts as *not*
equivalent. Inside the workers the library's own timers are disabled
(``parsing_timeout=None`` / ``timeout_seconds=None``, math-verify >= 0.9), so no
``signal.alarm`` is ever used.

Digit groups are one number before math-verify sees them, in the prediction and the gold
alike (:func:`join_digit_groups`): ``10\\,000`` is 10000 and ``7 200`` is 7200 wherever
they stand (math-verify alone reads them as the products 0 and 207).

Numbers are read the way math-verify's own test cases read them: a bare answer that is
one number with thousands separators (``1 000``, ``7,425,000``, ``1,000.99``) or a
decimal comma (``1000,99``, ``0,111``) is that number (:func:`read_plain_number`), in the
prediction and in the gold alike, instead of a LaTeX product (``1 000`` = 1·000) or a
set (``1,22`` = {1, 22}).

Safe from threads (callers share the pool; each worker serves one caller at a time), from
forked children (a new pool per process id), and from daemonic ``multiprocessing``
workers (workers are plain subprocesses, not ``multiprocessing`` children). Workers exit
when their parent dies (they watch the request pipe and their parent pid).

Input contract of :func:`verify_math`:

* ``prediction`` ``None``, empty or whitespace -> ``False`` (no answer is a wrong answer);
* ``prediction`` or ``gold`` not ``str`` (bytes, numbers...) -> :class:`InvalidAnswer`;
* text that is not valid UTF-8 (lone surrogates, e.g. from ``errors="surrogateescape"``)
  -> :class:`InvalidAnswer`;
* empty ``gold`` -> :class:`InvalidAnswer` (a benchmark bug, not a model error);
* a timeout, a crash of the worker, or text math-verify cannot parse -> ``False``;
* ``timeout_s`` not a finite number > 0, or bad comparison options ->
  :class:`~deciplane.errors.ConfigError`.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import re
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Iterable, Sequence

from deciplane.errors import ConfigError, InvalidAnswer

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 5.0
#: How long a fresh worker may take to import sympy/math-verify before we give up.
STARTUP_TIMEOUT_S = 120.0
_MAX_WORKERS = max(1, min(4, os.cpu_count() or 1))
_INT_RE = re.compile(r"[+-]?\d{1,60}")
# one number: thousands groups (one separator kind, a first group without a leading zero,
# then groups of exactly three digits), or a single decimal comma
_THOUSANDS_RE = re.compile(r"[+-]?[1-9]\d{0,2}(?P<sep>[ ,\u00a0\u2009\u202f])\d{3}"
                           r"(?:(?P=sep)\d{3})*(?:\.\d+)?")
_DECIMAL_COMMA_RE = re.compile(r"[+-]?\d+,\d+")
# digit groups inside any text: a first group of 1-3 digits (not starting with 0), then
# groups of exactly three digits, all separated by one kind of LaTeX or typographic space
_GROUP_SEP = r"(?:\\,|\\ |~| |\u2009|\u202f)"
_DIGIT_GROUPS_RE = re.compile(r"(?<![\d.,])[1-9]\d{0,2}(?P<sep>" + _GROUP_SEP + r")\d{3}"
                              r"(?:(?P=sep)\d{3})*(?![\d])")
_SEP_RE = re.compile(_GROUP_SEP)
#: math-verify's comparison options that verify_math passes through (and their defaults)
VERIFY_OPTIONS = {"float_rounding": 6, "strict": True, "allow_set_relation_comp": False,
                  "targets": ("latex", "expr")}
_TARGETS = ("latex", "expr")
_PKG_ROOT = str(Path(__file__).resolve().parents[3])  # the folder holding deciplane/


# ---------------------------------------------------------------- input validation --

def check_text(value: Any, what: str) -> str:
    """Return ``value`` if it is a UTF-8-encodable ``str``; else raise :class:`InvalidAnswer`."""
    if not isinstance(value, str):
        raise InvalidAnswer(
            f"{what} must be text (str), got {type(value).__name__}; decode bytes with "
            f".decode('utf-8') or convert numbers with str(...) first"
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidAnswer(
            f"{what} is not valid UTF-8 text ({exc.reason} at position {exc.start}); "
            "decode model output with errors='replace' instead of 'surrogateescape'"
        ) from None
    return value


def read_plain_number(text: str) -> str | None:
    """``text`` as a plain decimal if it is one number written with thousands separators
    or a decimal comma, else None. ``"1 000"`` -> ``"1000"``, ``"7,425,000"`` ->
    ``"7425000"``, ``"1,000.99"`` -> ``"1000.99"``, ``"1000,99"`` -> ``"1000.99"``,
    ``"0,111"`` -> ``"0.111"``, ``"1,22"`` -> ``"1.22"``; ``"1, 2"`` (a list) and
    ``"3,4,5"`` -> None. A comma followed by exactly three digits after a first group of
    1-3 digits not starting with 0 is a thousands separator (``"1,000"`` = 1000), as in
    math-verify's own test cases."""
    t = text.strip()
    if _THOUSANDS_RE.fullmatch(t):
        return re.sub(r"[ ,\u00a0\u2009\u202f]", "", t)
    if _DECIMAL_COMMA_RE.fullmatch(t):
        return t.replace(",", ".")
    return None


def join_digit_groups(text: str) -> str:
    """``text`` with every digit-grouped number written as one: a first group of 1-3
    digits, then groups of exactly three digits, separated (one kind throughout) by
    ``\\,``, ``\\ ``, ``~``, a space or a thin space (U+2009, U+202F) —
    ``"$\\boxed{10\\,000}$"`` -> ``"$\\boxed{10000}$"``, ``"7 200"`` -> ``"7200"``.
    Anything else is left as it is (``2\\,3``, ``10 00``, ``3.141 592``). math-verify
    itself reads such a space as a product or a concatenation (``10\\,000`` = 0,
    ``7 200`` = 207), which would call a wrong answer right."""
    return _DIGIT_GROUPS_RE.sub(lambda m: _SEP_RE.sub("", m.group(0)), text)


def _canonical(text: str) -> str:
    text = join_digit_groups(text)
    number = read_plain_number(text)
    return text if number is None else number


def check_options(timeout_s: Any, options: dict[str, Any]) -> dict[str, Any]:
    """Validated comparison options (``VERIFY_OPTIONS`` filled in); ConfigError if bad."""
    if (isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float))
            or not math.isfinite(timeout_s) or timeout_s <= 0):
        raise ConfigError(f"timeout_s must be a finite number of seconds > 0, got "
                          f"{timeout_s!r}; the default is {DEFAULT_TIMEOUT_S}")
    unknown = set(options) - set(VERIFY_OPTIONS)
    if unknown:
        raise ConfigError(f"unknown verify option(s) {sorted(unknown)}; allowed: "
                          f"{', '.join(VERIFY_OPTIONS)}")
    opts = {**VERIFY_OPTIONS, **options}
    fr = opts["float_rounding"]
    if isinstance(fr, bool) or not isinstance(fr, int) or not 0 <= fr <= 15:
        raise ConfigError(f"float_rounding must be an int in 0..15 (decimal places), got {fr!r}")
    for key in ("strict", "allow_set_relation_comp"):
        if not isinstance(opts[key], bool):
            raise ConfigError(f"{key} must be True or False, got {opts[key]!r}")
    targets = opts["targets"]
    if (isinstance(targets, str) or not targets
            or any(t not in _TARGETS for t in targets)):
        raise ConfigError(f"targets must be a non-empty list of {_TARGETS}, got {targets!r}")
    opts["targets"] = tuple(targets)
    return opts


def _fast_path(prediction: str, gold: str) -> bool | None:
    """Exact answer for two plain integers (what math-verify would say), else None."""
    p, g = prediction.strip(), gold.strip()
    if _INT_RE.fullmatch(p) and _INT_RE.fullmatch(g):
        return int(p) == int(g)
    return None


# ------------------------------------------------------------------- worker side --

_PROSE_RE = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{3,}")
_TEXT_RE = re.compile(r"\\(?:text|mathrm|textbf|mbox|operatorname|begin|end)\{[^{}]*\}")


def _looks_like_prose(text: str) -> bool:
    """A word of 3+ letters outside LaTeX commands and ``\\text{}``: a sentence, not a
    bare answer such as ``\\sqrt{2}+\\frac{1}{3}`` or ``x \\in [2,5)``."""
    return bool(_PROSE_RE.search(_TEXT_RE.sub("", text)))


def _configs(targets: Sequence[str]) -> list:
    """math-verify extraction configs for ``targets`` (the library defaults for both)."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig

    if tuple(targets) == _TARGETS:
        return [LatexExtractionConfig(), ExprExtractionConfig()]
    return [LatexExtractionConfig(boxed_match_priority=0) if t == "latex"
            else ExprExtractionConfig() for t in targets]


def _parse_pred(text: str, targets: Sequence[str] = _TARGETS) -> list:
    """Parse a prediction: a whole response (``$``/``\\boxed`` present, or prose) goes to
    math-verify's extraction as is; a bare answer is read as one LaTeX expression (raw
    extraction would keep only a fragment of ``\\sqrt{2}+\\frac{1}{3}``)."""
    from math_verify import parse

    def has_expr(res: list) -> bool:
        return any(not isinstance(r, str) for r in res)

    if "$" in text or "\\boxed" in text or "\\(" in text or "\\[" in text:
        attempts = [text]  # explicit math delimiters: math-verify's extraction decides
    elif _looks_like_prose(text):
        attempts = [text, f"\\boxed{{{text}}}"]
    else:
        attempts = [f"${text}$", text, f"\\boxed{{{text}}}"]
    configs = _configs(targets)
    first: list = []
    for i, attempt in enumerate(attempts):
        res = parse(attempt, configs, parsing_timeout=None)
        if i == 0:
            first = res
        if has_expr(res):
            return res
    return first


def _parse_gold(text: str, targets: Sequence[str] = _TARGETS) -> list:
    from math_verify import parse

    configs = _configs(targets)
    if "\\boxed" in text or "$" in text:
        res = parse(text, configs, parsing_timeout=None)
        if res:
            return res
    res = parse(f"\\boxed{{{text}}}", configs, parsing_timeout=None)
    # expression-only extraction does not look inside \boxed{}: read the bare text
    return res or parse(text, configs, parsing_timeout=None)


def _verify_in_worker(prediction: str, gold: str, options: dict[str, Any]) -> bool:
    from math_verify import verify

    options = dict(options)
    targets = options.pop("targets", _TARGETS)
    gold_parsed = _parse_gold(gold, targets)
    pred_parsed = _parse_pred(prediction, targets)
    if not gold_parsed or not pred_parsed:
        return False
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=None, **options))


def _watch_parent(ppid: int) -> None:
    while True:
        time.sleep(0.5)
        if os.getppid() != ppid:
            os._exit(0)


def _worker_main(req_fd: int, resp_fd: int, ppid: int) -> None:
    """Serve ``[(prediction, gold, options), ...]`` batches: one ``("ok", bool)`` each."""
    threading.Thread(target=_watch_parent, args=(ppid,), daemon=True).start()
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    req, resp = Connection(req_fd, writable=False), Connection(resp_fd, readable=False)
    from math_verify import parse

    if not parse("$1$", parsing_timeout=None):  # pragma: no cover - an old release
        resp.send(("error", "math-verify rejects parsing_timeout=None; "
                            "install math-verify>=0.9 (pip install 'math-verify>=0.9,<0.10')"))
        return
    resp.send(("ready", None))
    while True:
        try:
            batch = req.recv()
        except (EOFError, OSError):
            return
        for prediction, gold, options in batch:
            try:
                ok = _verify_in_worker(prediction, gold, options)
            except Exception:  # the library is robust, but never let one pair kill us
                ok = False
            resp.send(("ok", ok))


# ------------------------------------------------------------------- caller side --

class _WorkerDied(Exception):
    """A worker was found dead before it received a request (not a timeout)."""


class _Worker:
    """One persistent verification process and its two pipe ends."""

    def __init__(self) -> None:
        req_r, req_w = os.pipe()
        resp_r, resp_w = os.pipe()
        code = (f"import sys; sys.path.insert(0, {_PKG_ROOT!r}); "
                "from deciplane.envs.math.verify import _worker_main; "
                f"_worker_main({req_r}, {resp_w}, {os.getpid()})")
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", code], pass_fds=(req_r, resp_w), env=env,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, close_fds=True)
        finally:
            os.close(req_r)
            os.close(resp_w)
        self.req = Connection(req_w, readable=False)
        self.resp = Connection(resp_r, writable=False)
        self.ready = False

    def _wait_ready(self) -> None:
        if self.ready:
            return
        if not self.resp.poll(STARTUP_TIMEOUT_S):
            self.kill()
            raise RuntimeError("math-verify worker did not start within "
                               f"{STARTUP_TIMEOUT_S:.0f}s; is the machine overloaded?")
        kind, msg = self.resp.recv()
        if kind != "ready":
            self.kill()
            raise RuntimeError(f"math-verify worker failed to start: {msg}")
        self.ready = True

    def run(self, pairs: Sequence[tuple[str, str, dict[str, Any]]],
            timeout_s: float) -> list[bool | None]:
        """Verify ``pairs`` in order; ``None`` from the first pair that timed out on
        (the worker is then dead and must be replaced)."""
        self._wait_ready()
        try:
            self.req.send(list(pairs))
        except OSError:  # the worker died while idle (killed from outside, OOM...)
            self.kill()
            raise _WorkerDied from None
        out: list[bool | None] = []
        for _ in pairs:
            try:
                if not self.resp.poll(timeout_s):
                    self.kill()
                    break
                _, ok = self.resp.recv()
            except (EOFError, OSError):
                self.kill()
                break
            out.append(bool(ok))
        return out + [None] * (len(pairs) - len(out))

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass
        for conn in (self.req, self.resp):
            try:
                conn.close()
            except OSError:  # pragma: no cover
                pass


class _Pool:
    """Up to ``max_workers`` workers, created on demand, shared by the threads of one
    process."""

    def __init__(self, max_workers: int = _MAX_WORKERS) -> None:
        self.pid = os.getpid()
        self.max_workers = max_workers
        self.idle: list[_Worker] = []
        self.count = 0
        self.cond = threading.Condition()
        self.timeouts = 0

    def acquire(self) -> _Worker:
        with self.cond:
            while True:
                while self.idle:
                    w = self.idle.pop()
                    if w.alive():
                        return w
                    w.kill()
                    self.count -= 1
                if self.count < self.max_workers:
                    self.count += 1
                    break
                self.cond.wait()
        try:
            return _Worker()
        except BaseException:
            with self.cond:
                self.count -= 1
                self.cond.notify()
            raise

    def release(self, w: _Worker) -> None:
        with self.cond:
            if w.alive():
                self.idle.append(w)
            else:
                w.kill()
                self.count -= 1
            self.cond.notify()

    def shutdown(self) -> None:
        with self.cond:
            for w in self.idle:
                w.kill()
            self.idle.clear()
            self.count = 0


_POOL: _Pool | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> _Pool:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL.pid != os.getpid():  # new process (fork): own workers
            _POOL = _Pool()
        return _POOL


def _after_fork_in_child() -> None:
    """A forked child gets its own pool and a fresh lock (the parent's lock may have been
    held by another thread at fork time); the parent's workers stay the parent's."""
    global _POOL, _POOL_LOCK
    _POOL = None
    _POOL_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


@atexit.register
def shutdown_workers() -> None:
    """Stop this process's verification workers (they also exit on their own when the
    process dies)."""
    with _POOL_LOCK:
        if _POOL is not None and _POOL.pid == os.getpid():
            _POOL.shutdown()


def verify_many(pairs: Iterable[tuple[str | None, str]],
                timeout_s: float = DEFAULT_TIMEOUT_S, **options: Any) -> list[bool]:
    """:func:`verify_math` over many ``(prediction, gold)`` pairs with one round-trip to a
    worker; ``timeout_s`` bounds each pair separately."""
    opts = check_options(timeout_s, options)
    pairs = list(pairs)
    results: list[bool | None] = [None] * len(pairs)
    todo: list[int] = []
    for i, (pred, gold) in enumerate(pairs):
        check_text(gold, "gold")
        if not gold.strip():
            raise InvalidAnswer("gold answer is empty; fix the benchmark data")
        if pred is None:
            results[i] = False
            continue
        check_text(pred, "prediction")
        if not pred.strip():
            results[i] = False
            continue
        pairs[i] = (_canonical(pred), _canonical(gold))
        fast = _fast_path(*pairs[i])
        if fast is not None:
            results[i] = fast
        else:
            todo.append(i)
    pool = _pool()
    while todo:
        for attempt in range(3):
            worker = pool.acquire()
            try:
                got = worker.run([(pairs[i][0], pairs[i][1], opts) for i in todo],
                                 timeout_s)
                break
            except _WorkerDied:
                if attempt == 2:
                    raise RuntimeError("math-verify workers keep dying before they get work; "
                                       "check memory limits (ulimit -v) and stderr") from None
            finally:
                pool.release(worker)
        done = 0
        for i, ok in zip(todo, got):
            if ok is None:
                break
            results[i] = ok
            done += 1
        if done < len(todo):  # todo[done] timed out (or crashed the worker): wrong
            pool.timeouts += 1
            log.warning("math-verify timed out after %.1fs on a prediction of %d chars; "
                        "counted as not equivalent", timeout_s, len(pairs[todo[done]][0]))
            results[todo[done]] = False
            done += 1
        todo = todo[done:]
    return [bool(r) for r in results]


def verify_math(prediction: str | None, gold: str, timeout_s: float = DEFAULT_TIMEOUT_S,
                **options: Any) -> bool:
    """True if ``prediction`` is mathematically equivalent to ``gold`` per math-verify.

    ``prediction`` may be a bare answer (``"0.5"``, ``"\\frac12"``, ``"[2,5)"``) or a
    whole response (the last ``\\boxed{}`` wins, else math-verify's own extraction);
    ``gold`` is a bare answer as written in the benchmark. Comparison is asymmetric as
    in math-verify (gold first). Takes at most about ``timeout_s`` seconds of worker
    time; a timeout counts as ``False``. Two plain integers are compared directly
    without a worker; digit groups (``10\\,000``) are one number
    (:func:`join_digit_groups`) and numbers with thousands separators or a decimal comma
    are read as numbers (:func:`read_plain_number`). ``options``: math-verify's ``float_rounding``
    (decimal places compared, default 6), ``strict`` (default True: variables must
    match), ``allow_set_relation_comp`` (default False: ``x \\in [a,b]`` vs
    ``a \\le x \\le b``) and ``targets`` (what math-verify extracts: ``("latex",
    "expr")``, the default, or one of them). See the module docstring for invalid inputs.
    """
    return verify_many([(prediction, gold)], timeout_s=timeout_s, **options)[0]


__all__ = ["verify_math", "verify_many", "check_text", "read_plain_number", "join_digit_groups",
           "shutdown_workers",
           "DEFAULT_TIMEOUT_S", "VERIFY_OPTIONS"]
