"""Build and run code-generation programs in the :class:`~deciplane.envs.Sandbox`.

Two kinds of sandboxed run, both *one run per candidate*:

* :func:`run_hidden_tests` — the candidate program plus the task's hidden ``check``
  function (HumanEval format: ``def check(candidate): assert ...``), executed once; the
  result is a :class:`TestOutcome` (``passed`` and the failure kind). Used only by the
  held-out scorer's judge and by the training env ``deciplane/CodeGen-v0``.
* :func:`run_probes` — the candidate called on a list of probe *inputs* (no expected
  outputs), each call isolated (``try/except``, a per-probe time budget), the outputs
  written to a file as JSON lines; the behaviour signature of the candidate is the tuple
  of those outputs (exceptions and timeouts included). Used by Probe-ERPO and by
  consensus selection.

Nothing here runs candidate code in the caller's process: the candidate's source travels
as a file into a fresh sandbox scratch directory and is executed there by a small
driver (``main.py``). A candidate that forks, floods output, allocates too much or
sleeps is stopped by the sandbox's limits and classified from the sandbox status.

Program extraction (:func:`extract_program`) turns a model response into a program:
the first fenced code block that defines the entry point (else the first fenced block,
else the raw text); a full function definition is appended after the statement (so the
statement's imports and helpers stay available and the new definition replaces the
stub); a bare body is appended to the statement as its completion.
"""

from __future__ import annotations

import ast
import json
import re
import secrets
from dataclasses import dataclass
from typing import Any, Sequence

# Failure kinds of a hidden-test run (info["failure"] in CodeGen-v0).
FAILURE_KINDS = ("passed", "wrong_answer", "runtime_error", "syntax_error", "no_code",
                 "timeout", "memory", "output_limit", "killed", "sandbox_error",
                 "invalid_action")

DEFAULT_TEST_TIMEOUT_S = 6.0

INSTRUCTION = ("Complete this Python function. Answer with the whole function in a "
               "```python code block.")
"""What a code adapter / the calibration appends to a statement before chat-formatting."""
STOP = ("\n```\n",)
"""Stop strings for code responses: the end of the first fenced block (the opening fence
``\n```python\n`` does not match)."""
DEFAULT_MEMORY_MB = 512
MAX_PROGRAM_CHARS = 32_000

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


# ----------------------------------------------------------------------- hidden tests --

_TEST_DRIVER = r'''
import sys
_TOKEN = sys.argv[1] if len(sys.argv) > 1 else ""
def _main():
    with open("candidate.py", encoding="utf-8") as f:
        src = f.read()
    with open("tests.py", encoding="utf-8") as f:
        tests = f.read()
    try:
        code = compile(src, "candidate.py", "exec")
    except (SyntaxError, ValueError) as exc:
        sys.stderr.write(f"syntax error: {exc}\n")
        return 4
    ns = {"__name__": "candidate"}
    try:
        exec(code, ns)
        exec(compile(tests, "tests.py", "exec"), ns)
        ns["check"](ns[ENTRY_POINT])
    except AssertionError as exc:
        sys.stderr.write(f"assertion failed: {exc!r}\n")
        return 3
    except BaseException as exc:
        sys.stderr.write(f"{type(exc).__name__}: {exc}\n"[:2000])
        return 5
    sys.stdout.write("\n" + PASS_TOKEN + "\n")
    sys.stdout.flush()
    return 0
sys.exit(_main())
'''


@dataclass(frozen=True)
class TestOutcome:
    """One candidate's hidden-test run: ``passed`` and the failure kind
    (:data:`FAILURE_KINDS`); ``detail`` is the tail of the run's stderr or the reason."""

    passed: bool
    failure: str
    detail: str = ""
    wall_time_s: float = 0.0


def run_hidden_tests(sandbox, program: str | None, tests: str, entry_point: str, *,
                     timeout_s: float = DEFAULT_TEST_TIMEOUT_S,
                     memory_mb: int = DEFAULT_MEMORY_MB) -> TestOutcome:
    """Run ``program`` with the hidden ``tests`` (code defining ``check(candidate)``) in
    one sandbox run; ``passed`` only if ``check`` returned and the driver printed its
    per-run random token (a program that exits early with status 0 does not pass)."""
    if program is None or not program.strip():
        return TestOutcome(False, "no_code", "the response holds no code")
    token = f"DECIPLANE-PASS-{secrets.token_hex(8)}"
    driver = (f"ENTRY_POINT = {entry_point!r}\nPASS_TOKEN = {token!r}\n" + _TEST_DRIVER)
    res = sandbox.run(driver, files={"candidate.py": program, "tests.py": tests},
                      timeout_s=timeout_s, memory_mb=memory_mb, max_output_bytes=1 << 16)
    return _classify(res, token)


def _classify(res, token: str) -> TestOutcome:
    detail = (res.stderr or res.killed_reason or "")[-500:]
    if res.status == "ok":
        if token in res.stdout.splitlines()[-1:] or res.stdout.rstrip().endswith(token):
            return TestOutcome(True, "passed", "", res.wall_time_s)
        return TestOutcome(False, "runtime_error", "exited 0 before the tests finished",
                           res.wall_time_s)
    if res.status == "runtime_error":
        kind = {3: "wrong_answer", 4: "syntax_error"}.get(res.exit_code, "runtime_error")
        if kind == "runtime_error" and "MemoryError" in (res.stderr or ""):
            kind = "memory"
        return TestOutcome(False, kind, detail, res.wall_time_s)
    return TestOutcome(False, res.status, detail, res.wall_time_s)


# ----------------------------------------------------------------------------- probes --

TIMEOUT = "!timeout"
"""Signature entry of a probe call that ran past its time budget."""
NOT_RUN = "!not_run:"
"""Prefix of the entries of probes the run never reached (``!not_run:<sandbox status>``)."""
NO_CODE = "!no_code"
MAX_REPR = 300

_PROBE_DRIVER = r'''
import json, os, signal, sys, ast, hashlib
_PID = os.getpid()
class _ProbeTimeout(BaseException):
    pass
def _alarm(signum, frame):
    raise _ProbeTimeout()
signal.signal(signal.SIGALRM, _alarm)
_out = open("probe_out.jsonl", "w", encoding="utf-8")
def _emit(i, value):
    if os.getpid() != _PID:
        os._exit(0)
    _out.write(json.dumps([i, value]) + "\n")
    _out.flush()
def _show(x):
    try:
        r = repr(x)
    except BaseException as exc:
        return "!repr_error:" + type(exc).__name__
    if len(r) > MAX_REPR:
        r = r[:80] + "...#" + hashlib.sha256(r.encode("utf-8", "replace")).hexdigest()[:16]
    return r
with open("candidate.py", encoding="utf-8") as f:
    _src = f.read()
with open("probes.json", encoding="utf-8") as f:
    _probes = json.load(f)
_ns = {"__name__": "candidate"}
try:
    signal.setitimer(signal.ITIMER_REAL, DEFINE_BUDGET_S)
    exec(compile(_src, "candidate.py", "exec"), _ns)
    signal.setitimer(signal.ITIMER_REAL, 0)
    _fn = _ns[ENTRY_POINT]
except _ProbeTimeout:
    _emit(-1, "!timeout")
    sys.exit(0)
except BaseException as exc:
    signal.setitimer(signal.ITIMER_REAL, 0)
    _emit(-1, "!define:" + type(exc).__name__)
    sys.exit(0)
for _i, _p in enumerate(_probes):
    _args = ast.literal_eval(_p)
    try:
        signal.setitimer(signal.ITIMER_REAL, PROBE_BUDGET_S)
        _v = _show(_fn(*_args))
        signal.setitimer(signal.ITIMER_REAL, 0)
    except _ProbeTimeout:
        _v = "!timeout"
    except BaseException as exc:
        signal.setitimer(signal.ITIMER_REAL, 0)
        _v = "!" + type(exc).__name__
    _emit(_i, _v)
'''


@dataclass(frozen=True)
class ProbeRun:
    """One candidate on every probe: ``outputs[j]`` is probe ``j``'s output (``repr`` of
    the value, ``"!ExcName"``, ``"!timeout"``, ``"!not_run:<status>"``); ``status`` is
    the sandbox status of the whole run."""

    outputs: tuple[str, ...]
    status: str

    @property
    def signature(self) -> tuple[str, ...]:
        return self.outputs


def run_probes(sandbox, program: str | None, entry_point: str, probes: Sequence[str], *,
               probe_timeout_s: float = 1.0, timeout_s: float | None = None,
               memory_mb: int = 256) -> ProbeRun:
    """Call the candidate on each probe (a Python-literal *tuple of arguments*, e.g.
    ``"(3, [1, 2])"``) in one sandbox run; each call has ``probe_timeout_s``. The run's
    wall limit defaults to ``1 + probe_timeout_s * (len(probes) + 1)``; probes it never
    reached read ``!not_run:<status>`` (``timeout``, ``output_limit``, ``memory`` ...).
    A definition that fails gives every probe ``!define:<ExcName>``."""
    probes = list(probes)
    if program is None or not program.strip():
        return ProbeRun(tuple(NO_CODE for _ in probes), "no_code")
    if not probes:
        return ProbeRun((), "ok")
    if timeout_s is None:
        timeout_s = 1.0 + probe_timeout_s * (len(probes) + 1)
    driver = (f"ENTRY_POINT = {entry_point!r}\nMAX_REPR = {MAX_REPR}\n"
              f"PROBE_BUDGET_S = {float(probe_timeout_s)!r}\n"
              f"DEFINE_BUDGET_S = {float(probe_timeout_s)!r}\n" + _PROBE_DRIVER)
    res = sandbox.run(driver, files={"candidate.py": program,
                                     "probes.json": json.dumps(probes)},
                      timeout_s=timeout_s, memory_mb=memory_mb, max_output_bytes=1 << 16,
                      max_file_bytes=1 << 20, collect_files=["probe_out.jsonl"])
    return parse_probe_output(res.files.get("probe_out.jsonl", b""), len(probes), res.status)


def parse_probe_output(raw: bytes, n_probes: int, status: str) -> ProbeRun:
    """Outputs per probe from the driver's JSON lines (the first line per probe index
    wins; a ``-1`` line — the definition failed — fills every probe); probes without a
    line read ``!not_run:<status>``."""
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
