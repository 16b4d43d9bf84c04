"""Build and run code-generation programs in the :class:`~deciplane.envs.Sandbox`.

Two kinds of run, both *one sandbox run per candidate*:

* :func:`run_hidden_tests` — the task's hidden ``check`` function (HumanEval format:
  ``def check(candidate): assert ...``) judges the candidate; the result is a
  :class:`TestOutcome` (``passed`` and the failure kind). Used by the held-out scorer's
  judge and by the training env ``deciplane/CodeGen-v0``.
* :func:`run_probes` — the candidate called on a list of probe *inputs* (no expected
  outputs), each call with its own time budget; the behaviour signature of the candidate
  is the tuple of the outputs' ``repr`` (exceptions and timeouts included). Used by
  Probe-ERPO and by consensus selection.

Two processes, never one: the candidate's program runs alone in the sandbox (its source
is the only file there, next to a small server, ``main.py``) and answers *calls* over a
pipe, with plain data only (:mod:`deciplane.envs.code.wire`: None, bool, int, float,
str, bytes, list, tuple, dict, set, decoded by a bounded parser that builds nothing
else). The checker — the dataset's ``check``, the statement's helpers, the pass/fail
decision, the probes' ``repr`` — runs in a helper process of the caller, outside the
sandbox, and reports on its own stdout. So the candidate never sees the hidden tests,
the dataset or a pass token, its objects' ``__eq__`` never runs in the checker, and
nothing it prints can pass it. A candidate that exits, forks, floods output, allocates
too much or sleeps fails the call (the checker's deadlines, the sandbox's limits) and the
failure kind names it. docs/code.md states the threat model.

``warm=True`` (CodeGen-v0's default) starts both sides warm: the candidate in a kept
warm jail (``Sandbox.run(warm=True)``), the checker forked from a warm helper outside it
(:mod:`deciplane.envs.code.warm_checker`); same judgement, a few ms per run.

Program extraction (:func:`extract_program`) turns a model response into a program:
the first fenced code block that defines the entry point (else the first fenced block,
else the raw text); a full function definition is appended after the statement (so the
statement's imports and helpers stay available and the new definition replaces the
stub); a bare body is appended to the statement as its completion.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

# Failure kinds of a hidden-test run (info["failure"] in CodeGen-v0).
FAILURE_KINDS = ("passed", "wrong_answer", "runtime_error", "syntax_error", "no_code",
                 "timeout", "memory", "output_limit", "killed", "exited", "forked",
                 "unencodable", "unsupported_input", "protocol_error", "sandbox_error",
                 "invalid_action")
"""``exited``: the program's process ended (``os._exit``, ``sys.exit``, a signal it sent
itself) before answering; ``forked``: a call left a child process (or an orphaned
descendant) running; ``unencodable``: a call returned a value that is not plain data;
``unsupported_input``: the tests passed the candidate an argument plain data cannot carry (none of HumanEval's
164 tasks do); ``protocol_error``: the candidate's side wrote something that is not a
well-formed reply."""

DEFAULT_TEST_TIMEOUT_S = 6.0

INSTRUCTION = ("Complete this Python function. Answer with the whole function in a "
               "```python code block.")
"""What a code adapter / the calibration appends to a statement before chat-formatting."""
STOP = ("\n```\n",)
"""Stop strings for code responses: the end of the first fenced block (the opening fence
``\n```python\n`` does not match)."""
DEFAULT_MEMORY_MB = 512
MAX_PROGRAM_CHARS = 32_000
MAX_REPR = 300

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)


def _defines(code: str, entry_point: str) -> bool:
    return re.search(rf"^\s*def\s+{re.escape(entry_point)}\s*\(", code, re.M) is not None


def extract_program(response: str, prompt: str, entry_point: str) -> str | None:
    """The program a response stands for (``None`` when the response holds no code).

    A fenced block (```` ```python ````) that defines ``entry_point`` wins, then any
    fenced block, then the raw text. Code that defines ``entry_point`` is appended to the
    statement (its later ``def`` replaces the stub, the statement's imports stay); other
    code is taken as the completion of the statement's function body."""
    if not isinstance(response, str):
        return None
    text = response.replace("\r\n", "\n")
    blocks = [m.group(2) for m in _FENCE.finditer(text)]
    code = next((b for b in blocks if _defines(b, entry_point)), None)
    if code is None and blocks:
        code = blocks[0]
    if code is None:
        code = text
    code = code[:MAX_PROGRAM_CHARS]
    if not code.strip():
        return None
    if _defines(code, entry_point):
        return f"{prompt.rstrip()}\n\n\n{code.rstrip()}\n"
    first = next(line for line in code.split("\n") if line.strip())
    body = code if first.startswith((" ", "\t")) else _indent(code)
    return f"{prompt.rstrip()}\n{body.rstrip()}\n"


def _indent(code: str) -> str:
    return "\n".join(("    " + line) if line.strip() else line for line in code.split("\n"))


# ------------------------------------------------------------- the two-process channel --
#
# The candidate's side (inside the Sandbox): defines the program, then answers calls.
# The checker's side (a helper process of the caller, outside the sandbox): runs the
# dataset's own code and decides. They share three pipes and nothing else: requests
# (checker -> candidate), replies (candidate -> checker), and "alive" (the checker holds
# its write end; when the checker is gone the candidate's watchdog ends the program).

_SERVER = r'''
import os, signal, sys, threading
REQ, RESP, ALIVE = __FDS__
ENTRY_POINT = __ENTRY__
CALL_BUDGET_S = __BUDGET__
def _watch():
    try:
        while os.read(ALIVE, 1):
            pass
    except OSError:
        pass
    os._exit(0)
threading.Thread(target=_watch, daemon=True).start()
_PID = os.getpid()
try:    # orphaned descendants become our children, so a double fork is seen as "forked"
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)     # PR_SET_CHILD_SUBREAPER
except Exception:
    pass
class _CallTimeout(BaseException):
    pass
def _alarm(signum, frame):
    raise _CallTimeout()
signal.signal(signal.SIGALRM, _alarm)
def _arm(on):
    if CALL_BUDGET_S:
        signal.setitimer(signal.ITIMER_REAL, CALL_BUDGET_S if on else 0)
def _send(msg):
    if os.getpid() != _PID:
        os._exit(0)
    try:
        payload = encode(msg)
    except Exception:
        payload = encode(("unencodable", msg[1], _name(msg[2])))
    write_frame(RESP, payload)
def _name(v):
    try:
        return str.__str__(type(v).__name__)[:100]
    except BaseException:
        return "?"
def _live_children():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True
with open("candidate.py", encoding="utf-8") as _f:
    _src = _f.read()
_ns = {"__name__": "candidate"}
try:
    _code = compile(_src, "candidate.py", "exec")
except (SyntaxError, ValueError) as _exc:
    _send(("compile_error", 0, _name(_exc)))
    os._exit(0)
try:
    _arm(True)
    exec(_code, _ns)
    _arm(False)
    _fn = _ns[ENTRY_POINT]
except _CallTimeout:
    _send(("define_timeout", 0, None))
    os._exit(0)
except BaseException as _exc:
    _arm(False)
    _send(("define_error", 0, _name(_exc)))
    os._exit(0)
_send(("ready", 0, None))
while True:
    try:
        _msg = decode(read_frame(REQ))
        _op, _cid, _args, _kwargs = _msg
    except Exception:
        break
    try:
        _arm(True)
        _value = _fn(*_args, **_kwargs)
        _arm(False)
        _reply = ("ok", _cid, _value)
    except _CallTimeout:
        _reply = ("timeout", _cid, None)
    except SystemExit:
        _arm(False)
        _reply = ("exit", _cid, "SystemExit")
    except BaseException as _exc:
        _arm(False)
        _reply = ("raise", _cid, _name(_exc))
    if os.getpid() != _PID:
        os._exit(0)
    if _live_children():
        _reply = ("forked", _cid, None)
    _send(_reply)
    _value = _reply = None
os._exit(0)
'''

_CHECKER_BODY = r'''
import ast, hashlib, json, os, sys, time
REQ_W, RESP_R, ALIVE_W = _cfg["fds"]
_DEADLINE = time.monotonic() + _cfg["timeout_s"]
_CALL_S = _cfg["call_timeout_s"]
class _Fatal(BaseException):
    def __init__(self, kind, detail, soft=False):
        BaseException.__init__(self, kind)
        self.kind, self.detail, self.soft = kind, detail, soft
class CandidateError(Exception):
    """The candidate raised inside a call (its exception's name only crosses)."""
_state = {"calls": 0, "fatal": None, "raised": None}
def _fatal(kind, detail, soft=False):
    f = _Fatal(kind, detail, soft)
    if not soft:
        _state["fatal"] = f
    raise f
def _recv(cid, budget):
    deadline = min(_DEADLINE, time.monotonic() + budget) if budget else _DEADLINE
    while True:
        try:
            frame = read_frame(RESP_R, deadline)
        except EOFError:
            _fatal("exited", "the candidate's process ended" + (
                " during call %d" % cid if cid else " before its definition was ready"))
        except TimeoutError:
            _fatal("timeout", "no answer to call %d in time" % cid if cid else
                   "the definition was not ready in time")
        except (WireError, OSError):
            _fatal("protocol_error", "a malformed frame from the candidate")
        try:
            msg = decode(frame)
        except WireError as exc:
            _fatal("protocol_error", "a reply that is not plain data (%s)" % exc)
        if type(msg) is not tuple or len(msg) != 3 or type(msg[1]) is not int \
                or type(msg[0]) is not str:
            _fatal("protocol_error", "a reply of the wrong shape")
        if msg[1] < cid:
            continue        # a stale reply (e.g. from a forked child): skip
        if msg[1] != cid:
            _fatal("protocol_error", "a reply to a call not made")
        return msg[0], msg[2]
def _call(*args, **kwargs):
    if _state["fatal"] is not None:
        raise _state["fatal"]
    _state["calls"] += 1
    cid = _state["calls"]
    try:
        payload = encode(("call", cid, tuple(args), dict(kwargs)))
    except WireError as exc:
        _fatal("unsupported_input", "call %d: an argument is not plain data (%s)" % (cid, exc))
    try:
        write_frame(REQ_W, payload)
    except OSError:
        _fatal("exited", "the candidate's process ended before call %d" % cid)
    kind, value = _recv(cid, _CALL_S)
    if kind == "ok":
        return value
    if kind == "raise":
        name = value if type(value) is str else "?"
        _state["raised"] = name
        raise CandidateError("the candidate raised %s in call %d" % (name, cid))
    soft = _cfg["mode"] == "probes"
    if kind == "exit":
        _fatal("exited", "the candidate called sys.exit in call %d" % cid, soft)
    if kind == "timeout":
        _fatal("timeout", "call %d ran past its time budget" % cid, soft)
    if kind == "forked":
        _fatal("forked", "call %d left a child process running" % cid, soft)
    if kind == "unencodable":
        _fatal("unencodable", "call %d returned a value that is not plain data (%s)"
               % (cid, value if type(value) is str else "?"), soft)
    _fatal("protocol_error", "a reply of unknown kind in call %d" % cid)
def _ready():
    kind, value = _recv(0, None)
    if kind == "ready":
        return None
    if kind == "define_timeout":
        return "timeout", "!timeout"
    name = value if type(value) is str else "?"
    if kind == "compile_error":
        return "syntax_error", "!define:" + name
    if kind == "define_error":
        return ({"SyntaxError": "syntax_error", "MemoryError": "memory",
                 "SystemExit": "exited"}.get(name, "runtime_error"), "!define:" + name)
    _fatal("protocol_error", "no ready message")
def _show(x):
    try:
        r = repr(x)
    except BaseException as exc:
        return "!repr_error:" + type(exc).__name__
    if len(r) > _cfg["max_repr"]:
        r = r[:80] + "...#" + hashlib.sha256(r.encode("utf-8", "replace")).hexdigest()[:16]
    return r
def _check():
    ns = {"__name__": "checker"}
    if _cfg["prompt"]:
        try:    # the dataset's own helpers (HumanEval/32 poly, /38 encode_cyclic ...)
            exec(compile(_cfg["prompt"], "statement.py", "exec"), ns)
        except Exception:
            pass
    try:
        bad = _ready()
    except _Fatal as f:
        return {"failure": f.kind, "detail": f.detail}
    if bad is not None:
        return {"failure": bad[0], "detail": "the program's definition failed (%s)" % bad[1]}
    ns[_cfg["entry_point"]] = _call
    ns["candidate"] = _call
    try:
        exec(compile(_cfg["tests"], "tests.py", "exec"), ns)
        ns["check"](_call)
        kind, detail = "passed", ""
    except _Fatal as f:
        kind, detail = f.kind, f.detail
    except AssertionError:
        kind, detail = "wrong_answer", "an assertion of the hidden tests failed"
    except CandidateError as exc:
        kind, detail = ("memory" if _state["raised"] == "MemoryError" else "runtime_error",
                        str(exc))
    except BaseException as exc:
        kind, detail = "runtime_error", "the hidden tests raised %s on the candidate's " \
            "answers" % type(exc).__name__
    if _state["fatal"] is not None:       # swallowed by a bare except in the tests
        kind, detail = _state["fatal"].kind, _state["fatal"].detail
    return {"failure": kind, "detail": detail + (" (%d calls)" % _state["calls"])}
def _probes():
    probes = _cfg["probes"]
    out = [None] * len(probes)
    try:
        bad = _ready()
    except _Fatal:
        return {"outputs": out}
    if bad is not None:
        return {"outputs": [bad[1]] * len(probes)}
    for i, p in enumerate(probes):
        try:
            args = ast.literal_eval(p)
            if not isinstance(args, tuple):
                args = (args,)
        except Exception:
            out[i] = "!bad_probe"
            continue
        try:
            out[i] = _show(_call(*args))
        except CandidateError:
            out[i] = "!" + _state["raised"]
        except _Fatal as f:
            if not f.soft:
                if f.kind == "timeout":
                    out[i] = "!timeout"
                break
            out[i] = {"exited": "!SystemExit", "timeout": "!timeout",
                      "forked": "!forked"}.get(f.kind) or "!" + f.kind + ":" + \
                f.detail.rsplit("(", 1)[-1].rstrip(")")
    return {"outputs": out}
_res = _check() if _cfg["mode"] == "check" else _probes()
sys.stdout.write("\n" + json.dumps(_res) + "\n")
sys.stdout.flush()
for _fd in (REQ_W, RESP_R, ALIVE_W):
    try:
        os.close(_fd)
    except OSError:
        pass
os._exit(0)
'''
_CHECKER = "import json, sys\n_cfg = json.loads(sys.stdin.read())\n" + _CHECKER_BODY
"""The cold checker: a new helper process per run reads its configuration on stdin.
The warm one (:mod:`deciplane.envs.code.warm_checker`) forks ``_CHECKER_BODY`` from a
zygote with the configuration already in memory."""


@functools.lru_cache(maxsize=1)
def _wire_source() -> str:
    """The codec's source, prepended to both sides' programs (read once per process)."""
    from deciplane.envs.code import wire
    return Path(wire.__file__).read_text(encoding="utf-8")


def _run_channel(sandbox, program: str, cfg: dict, *, timeout_s: float, memory_mb: int,
                 call_budget_s: float | None, warm: bool = False):
    """Run ``program`` as the candidate's side in ``sandbox`` and the checker's side
    (``cfg["mode"]``: ``check`` or ``probes``) in a helper process of this one, joined by
    three pipes. Returns ``(checker's result dict or None, sandbox result or None,
    reason)``. ``warm``: the candidate runs in a warm jail (``Sandbox.run(warm=True)``)
    and the checker is forked from a warm helper (:mod:`.warm_checker`); a run whose jail
    broke is re-done cold from the start, with new pipes and a new checker."""
    from deciplane.sandbox import Sandbox

    if not isinstance(sandbox, Sandbox) or sandbox.backend == "docker":
        return None, None, ("the code harness needs a local bwrap or namespace Sandbox "
                            "(its checker talks to the candidate over pipes)")
    if warm and os.environ.get("DECIPLANE_SANDBOX_WARM", "1") != "0":
        from deciplane.errors import WarmJailBroken
        try:
            return _run_channel_once(sandbox, program, cfg, timeout_s=timeout_s,
                                     memory_mb=memory_mb, call_budget_s=call_budget_s,
                                     warm=True)
        except WarmJailBroken:
            pass            # the candidate broke its jail: judge it again, cold
    return _run_channel_once(sandbox, program, cfg, timeout_s=timeout_s, memory_mb=memory_mb,
                             call_budget_s=call_budget_s, warm=False)


def _run_channel_once(sandbox, program: str, cfg: dict, *, timeout_s: float, memory_mb: int,
                      call_budget_s: float | None, warm: bool):
    wire_src = _wire_source()
    fds = [os.pipe() for _ in range(3)]          # request, reply, alive
    (req_r, req_w), (resp_r, resp_w), (alive_r, alive_w) = fds
    ours = [req_w, resp_r, alive_w]
    theirs = [req_r, resp_w, alive_r]
    checker = _start_checker(wire_src, cfg, ours, timeout_s, warm)
    for fd in ours:
        os.close(fd)
    t0 = time.monotonic()
    if isinstance(checker, str):
        for fd in theirs:
            os.close(fd)
        return None, None, checker
    server = (wire_src + _SERVER.replace("__FDS__", repr(tuple(theirs)))
              .replace("__ENTRY__", repr(cfg["entry_point"]))
              .replace("__BUDGET__", repr(call_budget_s)))
    res = None
    try:
        res = sandbox.run(server, files={"candidate.py": program},
                          timeout_s=timeout_s + 1.5, memory_mb=memory_mb,
                          max_output_bytes=1 << 16, max_file_bytes=1 << 20,
                          channel_fds=theirs, warm=warm)
    except Exception as exc:  # noqa: BLE001 - a sandbox failure is a classified outcome
        checker.kill()
        from deciplane.errors import WarmJailBroken
        if isinstance(exc, WarmJailBroken):
            raise
        return None, None, f"sandbox failed: {type(exc).__name__}: {exc}"[:300]
    out = checker.result(t0 + timeout_s + 2.0)
    if out is None:
        checker.kill()
        return None, res, "timeout"
    try:
        verdict = json.loads(out.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None, res, f"the checker failed ({checker.describe()})"
    return verdict, res, ""


class _ColdChecker:
    """The checker as a new helper process of this one (``python -I -S``)."""

    def __init__(self, wire_src: str, cfg: dict, ours: list[int], timeout_s: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", wire_src + _CHECKER], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=tuple(ours),
            close_fds=True, cwd="/", env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"})
        try:
            self.proc.stdin.write(json.dumps({**cfg, "fds": ours,
                                              "timeout_s": float(timeout_s)}).encode())
            self.proc.stdin.close()
        except OSError:
            pass
        self.proc.stdin = None

    def result(self, deadline: float) -> bytes | None:
        try:
            out, _ = self.proc.communicate(timeout=max(0.5, deadline - time.monotonic()))
            return out
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        self.proc.kill()
        self.proc.communicate()

    def describe(self) -> str:
        return f"exit {self.proc.returncode}"


class _WarmChecker:
    """The checker forked from the warm helper; its verdict comes on a pipe of ours."""

    def __init__(self, pid: int, verdict_r: int) -> None:
        self.pid, self.fd = pid, verdict_r

    def result(self, deadline: float) -> bytes | None:
        from deciplane.envs.code import warm_checker
        try:
            # at least 0.5 s, as the cold checker gets
            return warm_checker.read_verdict(self.fd, max(deadline, time.monotonic() + 0.5))
        finally:
            os.close(self.fd)
            self.fd = -1

    def kill(self) -> None:
        from deciplane.envs.code import warm_checker
        warm_checker.kill_checker(self.pid)
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def describe(self) -> str:
        return "no verdict"


def _start_checker(wire_src: str, cfg: dict, ours: list[int], timeout_s: float, warm: bool):
    """The run's checker (warm if asked and the warm helper serves, else cold), or the
    reason (str) it could not start. ``ours`` stay open (the caller closes them)."""
    if warm:
        from deciplane.envs.code import warm_checker
        vr, vw = os.pipe()
        try:
            pid = warm_checker.fork_checker(wire_src, _CHECKER_BODY,
                                            {**cfg, "timeout_s": float(timeout_s)},
                                            ours + [vw])
        finally:
            os.close(vw)
        if pid is not None:
            return _WarmChecker(pid, vr)
        os.close(vr)
    try:
        return _ColdChecker(wire_src, cfg, ours, timeout_s)
    except OSError as exc:
        return f"could not start the checker: {exc}"


# ----------------------------------------------------------------------- hidden tests --

@dataclass(frozen=True)
class TestOutcome:
    """One candidate's hidden-test run: ``passed`` and the failure kind
    (:data:`FAILURE_KINDS`); ``detail`` says what happened in words that never echo the
    hidden tests (the failure kind, the call number, an exception's name)."""

    passed: bool
    failure: str
    detail: str = ""
    wall_time_s: float = 0.0


_REFINED = ("output_limit", "memory", "killed", "timeout")


def run_hidden_tests(sandbox, program: str | None, tests: str, entry_point: str, *,
                     timeout_s: float = DEFAULT_TEST_TIMEOUT_S,
                     memory_mb: int = DEFAULT_MEMORY_MB, prompt: str = "",
                     warm: bool = False) -> TestOutcome:
    """Judge ``program`` by the hidden ``tests`` (code defining ``check(candidate)``).

    The program runs alone in the ``sandbox`` and answers calls over a pipe with plain
    data (:mod:`~deciplane.envs.code.wire`); ``check`` runs in a helper process outside
    the sandbox, with a ``candidate`` that forwards each call, after ``prompt`` (the
    statement: its helpers, e.g. HumanEval/32's ``poly``, are the dataset's own, never
    the program's). ``passed`` only if ``check`` returned; the verdict travels on the
    helper's own stdout. ``timeout_s`` bounds the whole run (start-up and every call).
    ``warm``: the candidate runs in a warm jail and the checker is forked from a warm
    helper (same judgement, a few ms instead of two process start-ups; docs/code.md)."""
    t0 = time.monotonic()
    if program is None or not program.strip():
        return TestOutcome(False, "no_code", "the response holds no code")
    cfg = {"mode": "check", "tests": tests, "prompt": prompt or "",
           "entry_point": entry_point, "call_timeout_s": None, "max_repr": MAX_REPR}
    verdict, res, why = _run_channel(sandbox, program, cfg, timeout_s=timeout_s,
                                     memory_mb=memory_mb, call_budget_s=None, warm=warm)
    wall = round(time.monotonic() - t0, 6)
    if verdict is None:
        kind = "timeout" if why == "timeout" else "sandbox_error"
        return TestOutcome(False, kind, why, wall)
    kind, detail = verdict["failure"], verdict.get("detail", "")
    if kind in ("exited", "timeout", "protocol_error") and res is not None:
        if res.status in _REFINED:
            kind, detail = res.status, f"{detail}; the sandbox stopped it: {res.killed_reason}"
        elif res.status == "sandbox_error":
            kind, detail = "sandbox_error", str(res.killed_reason)[:300]
    if kind not in FAILURE_KINDS:
        kind = "runtime_error"
    return TestOutcome(kind == "passed", kind, detail, wall)


# ----------------------------------------------------------------------------- probes --

TIMEOUT = "!timeout"
"""Signature entry of a probe call that ran past its time budget."""
NOT_RUN = "!not_run:"
"""Prefix of the entries of probes the run never reached (``!not_run:<sandbox status>``)."""
NO_CODE = "!no_code"


@dataclass(frozen=True)
class ProbeRun:
    """One candidate on every probe: ``outputs[j]`` is probe ``j``'s output (``repr`` of
    the value, ``"!ExcName"``, ``"!timeout"``, ``"!forked"``, ``"!unencodable:<type>"``,
    ``"!not_run:<status>"``); ``status`` is the sandbox status of the whole run."""

    outputs: tuple[str, ...]
    status: str

    @property
    def signature(self) -> tuple[str, ...]:
        return self.outputs


def run_probes(sandbox, program: str | None, entry_point: str, probes: Sequence[str], *,
               probe_timeout_s: float = 1.0, timeout_s: float | None = None,
               memory_mb: int = 256, warm: bool = False) -> ProbeRun:
    """Call the candidate on each probe (a Python-literal *tuple of arguments*, e.g.
    ``"(3, [1, 2])"``); each call has ``probe_timeout_s``. As for hidden tests, the
    program runs alone in the sandbox and returns plain data over a pipe; the outputs'
    ``repr`` is computed outside, by the caller's helper. The run's wall limit defaults
    to ``1 + probe_timeout_s * (len(probes) + 1)``; probes it never reached read
    ``!not_run:<status>`` (``timeout``, ``output_limit``, ``memory`` ...). A definition
    that fails gives every probe ``!define:<ExcName>``. ``warm``: as for
    :func:`run_hidden_tests`."""
    probes = list(probes)
    if program is None or not program.strip():
        return ProbeRun(tuple(NO_CODE for _ in probes), "no_code")
    if not probes:
        return ProbeRun((), "ok")
    if timeout_s is None:
        timeout_s = 1.0 + probe_timeout_s * (len(probes) + 1)
    cfg = {"mode": "probes", "probes": probes, "prompt": "", "tests": "",
           "entry_point": entry_point, "call_timeout_s": float(probe_timeout_s) + 0.5,
           "max_repr": MAX_REPR}
    verdict, res, why = _run_channel(sandbox, program, cfg, timeout_s=timeout_s,
                                     memory_mb=memory_mb,
                                     call_budget_s=float(probe_timeout_s), warm=warm)
    status = res.status if res is not None else ("timeout" if why == "timeout"
                                                 else "sandbox_error")
    outs = (verdict or {}).get("outputs") or [None] * len(probes)
    missing = f"{NOT_RUN}{status}"
    return ProbeRun(tuple(o[:MAX_REPR + 40] if isinstance(o, str) else missing
                          for o in outs), status)


def parse_probe_output(raw: bytes, n_probes: int, status: str) -> ProbeRun:
    """Outputs per probe from JSON lines ``[index, output]`` (the format the one-process
    probe driver wrote before the two-process harness; kept for reading such files): the
    first line per probe index wins; a ``-1`` line — the definition failed — fills every
    probe; probes without a line read ``!not_run:<status>``."""
    got: dict[int, str] = {}
    for line in raw.decode("utf-8", "replace").splitlines():
        try:
            i, v = json.loads(line)
        except (ValueError, TypeError):
            continue
        if not isinstance(i, int) or not isinstance(v, str):
            continue
        if i == -1:
            return ProbeRun(tuple(v for _ in range(n_probes)), status)
        if 0 <= i < n_probes:
            got.setdefault(i, v[:MAX_REPR + 40])
    missing = f"{NOT_RUN}{status}"
    return ProbeRun(tuple(got.get(j, missing) for j in range(n_probes)), status)


def is_probe(text: Any) -> bool:
    """Whether ``text`` is a valid probe: a Python literal that is a tuple of arguments."""
    if not isinstance(text, str) or len(text) > 2000:
        return False
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False
    return isinstance(value, tuple)


__all__ = ["INSTRUCTION", "STOP", "extract_program", "run_hidden_tests", "run_probes", "parse_probe_output",
           "TestOutcome", "ProbeRun", "FAILURE_KINDS", "is_probe", "TIMEOUT", "NOT_RUN",
           "NO_CODE"]
