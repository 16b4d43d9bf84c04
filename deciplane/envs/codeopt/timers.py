"""Timers for CodeOpt: how fast is a candidate program compared with the reference?

Both timers run the programs in the same :class:`deciplane.envs.Sandbox` with the same
limits and ``PYTHONHASHSEED=0``:

* :class:`CpuTimer` (``"cpu"``) — reference and candidate runs interleaved (the order
  alternates every repeat), each cost the run's CPU time as the sandbox accounts it
  (rusage + cgroup: the whole process tree). Speedup = median(ref) / median(cand). A
  noise band is measured once per task from reference-vs-reference runs
  (:func:`~deciplane.envs.codeopt.reward.noise_band`), widened if the reference's own
  runs during a measurement are noisier than that; speedups inside it count as 1.0.
* :class:`InstructionTimer` (``"instructions"``) — instructions executed, counted by
  valgrind's callgrind, minus the count of an empty program (interpreter start-up and
  shutdown). Exactly repeatable for a deterministic program, so one run suffices and the
  band is 0. About 50x slower than a native run, so tasks give it a smaller input.

The callgrind totals are read from a log file written by valgrind under a random name,
never from the program's own stdout/stderr (which it could forge); a log holding more
than one total is treated as tampered. Callgrind follows children
(``--trace-children=yes``), so a program that starts processes shows a second pid and is
judged ``multiprocess``: the instructions timer measures single-process programs.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import subprocess
from pathlib import Path
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from deciplane.envs.codeopt import reward as R
from deciplane.errors import BackendUnavailable, SandboxError
from deciplane.sandbox.limits import LAUNCH_VERSION

HASH_SEED_ENV = {"PYTHONHASHSEED": "0"}
# callgrind without its profile file; children (fork/exec) are followed so they show up
CALLGRIND_ARGS = ("--tool=callgrind", "--callgrind-out-file=/dev/null", "--trace-children=yes")
EMPTY_PROGRAM = "pass\n"


@dataclass
class RunCost:
    """One sandboxed run: its cost (None if the run failed) and the sandbox result."""

    cost: float | None
    result: Any  # deciplane.envs.SandboxResult
    failure: str | None = None   # why ``cost`` is None: a sandbox status, "tampered"...
    detail: str = ""


@dataclass
class Measurement:
    """Reference vs candidate on one optimisation input."""

    timer: str
    unit: str
    ref_costs: list[float]     # per run: CPU seconds, or total instructions (incl. baseline)
    cand_costs: list[float]
    ref_cost: float            # median (cpu), or instructions beyond the baseline
    cand_cost: float
    raw_speedup: float
    speedup: float             # after the noise band
    noise_band: float
    baseline: float | None = None   # instructions of an empty program (instructions timer)
    failure: str | None = None      # the candidate's perf run failed: its kind
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass
class _Calibration:
    ref_a: list[float]
    ref_b: list[float]
    band: float
    ref_wall_s: float


def _key(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    return h.hexdigest()


class Timer(ABC):
    """Runs reference and candidate on an optimisation input and reports the speedup.

    Arguments:
        sandbox: the :class:`deciplane.envs.Sandbox` to run in.
        repeats: candidate runs per measurement (cpu: interleaved pairs).
        memory_mb: memory limit of every timed run.
        max_procs: process limit of every timed run. Work in helper processes is not
            hidden: the cpu timer's cost covers the run's whole process tree (cgroup), and
            callgrind follows forks and execs (``--trace-children=yes``).
    """

    name: str = ""
    unit: str = ""

    def __init__(self, sandbox: Any, repeats: int, memory_mb: int, max_procs: int) -> None:
        if repeats < 1:
            raise ValueError(f"repeats must be >= 1, got {repeats}")
        self.sandbox = sandbox
        self.repeats = repeats
        self.memory_mb = memory_mb
        self.max_procs = max_procs

    @abstractmethod
    def run(self, code: str, stdin: str, timeout_s: float) -> RunCost:
        """Run ``code`` once and return its cost."""

    @abstractmethod
    def measure(self, ref_code: str, cand_code: str, stdin: str,
                check: Callable[[str], bool]) -> Measurement:
        """Time reference and candidate; ``check(stdout)`` validates the candidate's
        output on the optimisation input (a wrong answer there is a failure)."""

    @abstractmethod
    def cost(self, code: str, stdin: str) -> float:
        """The cost of a trusted program (a reference solution), cached."""

    def _ref_run(self, code: str, stdin: str, timeout_s: float) -> RunCost:
        rc = self.run(code, stdin, timeout_s)
        if rc.cost is None:
            res = rc.result
            raise SandboxError(
                f"the reference program failed under the {self.name} timer ({rc.failure}): "
                f"{(res.killed_reason or res.stderr or '')[-800:]}. This is a task or "
                "sandbox problem, not the candidate's: check `deciplane doctor`, or raise "
                "the limits (memory_mb / timeout).")
        return rc


class CpuTimer(Timer):
    """Median CPU time over interleaved repeats, with a noise band from start-up
    reference-vs-reference runs.

    Arguments (beyond :class:`Timer`):
        calibration_pairs: reference-vs-reference pairs measured (once per task) for the
            noise band; default ``max(repeats, 5)``.
        z, band_floor: see :func:`~deciplane.envs.codeopt.reward.noise_band`.
        slowdown_limit: a candidate perf run is stopped after this many times the
            reference's wall time (plus 1 s): status ``timeout``.
    """

    name = "cpu"
    unit = "s"

    def __init__(self, sandbox: Any, repeats: int = 5, calibration_pairs: int | None = None,
                 z: float = R.DEFAULT_Z, band_floor: float = R.DEFAULT_FLOOR,
                 memory_mb: int = 512, max_procs: int = 32, slowdown_limit: float = 5.0,
                 ref_timeout_s: float = 120.0) -> None:
        super().__init__(sandbox, repeats, memory_mb, max_procs)
        self.calibration_pairs = calibration_pairs or max(repeats, 5)
        self.z = z
        self.band_floor = band_floor
        self.slowdown_limit = slowdown_limit
        self.ref_timeout_s = ref_timeout_s
        self._calibrations: dict[str, _Calibration] = {}
        self._costs: dict[str, float] = {}

    def run(self, code: str, stdin: str, timeout_s: float) -> RunCost:
        res = self.sandbox.run(code, stdin=stdin, timeout_s=timeout_s,
                               cpu_time_s=timeout_s, memory_mb=self.memory_mb,
                               max_procs=self.max_procs, env=dict(HASH_SEED_ENV))
        if res.status != "ok":
            return RunCost(None, res, res.status)
        return RunCost(max(res.cpu_time_s, 1e-6), res)

    def calibrate(self, ref_code: str, stdin: str) -> _Calibration:
        """Reference-vs-reference pairs for the noise band (cached per code and input)."""
        key = _key(ref_code, stdin)
        if key not in self._calibrations:
            a, b, walls = [], [], []
            for _ in range(self.calibration_pairs):
                ra = self._ref_run(ref_code, stdin, self.ref_timeout_s)
                rb = self._ref_run(ref_code, stdin, self.ref_timeout_s)
                a.append(ra.cost)
                b.append(rb.cost)
                walls += [ra.result.wall_time_s, rb.result.wall_time_s]
            band = R.noise_band(a, b, repeats=self.repeats, z=self.z, floor=self.band_floor)
            self._calibrations[key] = _Calibration(a, b, band, R.median(walls))
        return self._calibrations[key]

    def measure(self, ref_code: str, cand_code: str, stdin: str,
                check: Callable[[str], bool]) -> Measurement:
        cal = self.calibrate(ref_code, stdin)
        cand_timeout = self.slowdown_limit * cal.ref_wall_s + 1.0
        ref_costs: list[float] = []
        cand_costs: list[float] = []
        for i, order in enumerate(interleave_order(self.repeats)):
            for who in order:
                if who == "ref":
                    ref_costs.append(self._ref_run(ref_code, stdin, self.ref_timeout_s).cost)
                    continue
                rc = self.run(cand_code, stdin, cand_timeout)
                failure = rc.failure or (None if check(rc.result.stdout) else "wrong_answer")
                if failure:
                    return self._failed(failure, cal.band, ref_costs, cand_costs,
                                        f"candidate run {i + 1} on the optimisation input: "
                                        f"{failure} (limit {cand_timeout:.1f} s wall)")
                cand_costs.append(rc.cost)
        ref = R.median(ref_costs)
        cand = R.median(cand_costs)
        raw = R.speedup(ref, cand)
        band = cal.band
        if len(ref_costs) >= 3:
            # the machine may be noisier now than at start-up: the reference's own runs
            # during this measurement, taken as consecutive pairs, can widen the band
            now = R.noise_band(ref_costs[:-1], ref_costs[1:], repeats=self.repeats,
                               z=self.z, floor=self.band_floor)
            band = max(band, now)
        return Measurement(self.name, self.unit, ref_costs, cand_costs, ref, cand, raw,
                           R.apply_noise_band(raw, band), band,
                           detail=f"noise band: start-up {cal.band:.2%}, now {band:.2%}")

    def cost(self, code: str, stdin: str) -> float:
        key = _key(code, stdin)
        if key not in self._costs:
            self._costs[key] = R.median([self._ref_run(code, stdin, self.ref_timeout_s).cost
                                         for _ in range(self.repeats)])
        return self._costs[key]

    def _failed(self, failure: str, band: float, ref_costs: list[float],
                cand_costs: list[float], detail: str) -> Measurement:
        return Measurement(self.name, self.unit, ref_costs, cand_costs, float("nan"),
                           float("nan"), float("nan"), 1.0, band, failure=failure,
                           detail=detail)


_COLLECTED = re.compile(r"^==(\d+)== Collected : (\d+)\s*$", re.M)
_COMMAND = re.compile(r"^==(\d+)== Command: (.*)$", re.M)
_PID_PREFIX = re.compile(r"^==(\d+)==", re.M)


class CallgrindLogError(ValueError):
    """A callgrind log that cannot be trusted; ``kind`` is the verdict it leads to:
    ``tampered`` (written to by the program), ``multiprocess`` (more than one process
    ran: the instructions timer measures single-process programs only) or
    ``sandbox_error`` (incomplete: the run did not finish normally)."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


def parse_callgrind_log(text: str, command: str | None = None) -> int:
    """Instructions executed by the one process of a callgrind log (``--log-file``).

    The run must be a single process (with ``--trace-children=yes`` every forked or
    exec'd child writes its own lines here, so a child shows up as a second pid): a
    second pid raises ``CallgrindLogError(kind="multiprocess")``, two totals for one
    process ``kind="tampered"``, a ``Command:`` other than ``command`` (when given)
    ``kind="tampered"``, no total ``kind="sandbox_error"``.
    """
    m = _COMMAND.search(text)
    if not m:
        raise CallgrindLogError("not a callgrind log: no '==PID== Command:' line",
                                "sandbox_error")
    main_pid = m.group(1)
    if command is not None and m.group(2).strip() != command:
        raise CallgrindLogError(f"callgrind log names command {m.group(2)!r}, expected "
                                f"{command!r}: tampered", "tampered")
    pids = set(_PID_PREFIX.findall(text))
    if pids - {main_pid}:
        raise CallgrindLogError(
            f"more than one process ran (pids {sorted(pids)}); the instructions timer "
            "measures single-process programs only — use timer='cpu' for programs that "
            "start processes", "multiprocess")
    totals = [int(n) for pid, n in _COLLECTED.findall(text)]
    if len(totals) > 1:
        raise CallgrindLogError(f"callgrind log has {len(totals)} totals for process "
                                f"{main_pid}: tampered", "tampered")
    if not totals:
        raise CallgrindLogError(f"callgrind log has no total for process {main_pid} (the "
                                "run did not finish normally)", "sandbox_error")
    return totals[0]


# Instruction counts are exact and depend only on the program, its input and the
# sandbox set-up: shared by every InstructionTimer of the process (and on disk).
_INSTR_CACHE: dict[str, tuple[int, float]] = {}


def _tool_identity(path: str) -> str:
    """Path, size and mtime of an executable: a changed binary changes the counts."""
    try:
        st = os.stat(path)
        return f"{path}:{st.st_size}:{st.st_mtime_ns}"
    except OSError:
        return path


def _valgrind_version(path: str) -> str:
    try:
        return subprocess.run([path, "--version"], capture_output=True, text=True,
                              timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


class InstructionTimer(Timer):
    """Callgrind instruction counts beyond an empty program's, ``PYTHONHASHSEED=0``.

    Arguments (beyond :class:`Timer`):
        valgrind: path of the valgrind executable (Debian: ``apt-get install valgrind``).
        ref_timeout_s: wall limit of a reference (or empty-program) run under callgrind.
        slowdown_limit: a candidate run is stopped after this many times the reference's
            wall time plus 30 s.
        cache_dir: where counts of trusted programs (references, the empty program) are
            kept across processes — exact, so safe to reuse; keyed by program, input,
            sandbox backend and limits, and the valgrind and python binaries. Default
            ``$DECIPLANE_HOME/codeopt/instructions``; None: memory only.
    """

    name = "instructions"
    unit = "instructions"

    def __init__(self, sandbox: Any, repeats: int = 1, valgrind: str | None = None,
                 memory_mb: int = 2048, max_procs: int = 32, ref_timeout_s: float = 600.0,
                 slowdown_limit: float = 5.0, cache_dir: str | Path | None = "default"
                 ) -> None:
        super().__init__(sandbox, repeats, memory_mb, max_procs)
        found = valgrind or shutil.which("valgrind") or "/usr/bin/valgrind"
        if not shutil.which(found):
            raise BackendUnavailable(
                "the instructions timer needs valgrind, which is not installed here; "
                "install it (`apt-get install valgrind`) or use timer='cpu'")
        self.valgrind = shutil.which(found)
        self.ref_timeout_s = ref_timeout_s
        self.slowdown_limit = slowdown_limit
        if cache_dir == "default":
            from deciplane.utils import deciplane_home

            cache_dir = deciplane_home() / "codeopt" / "instructions"
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self._identity = _key(self.sandbox.backend, *CALLGRIND_ARGS,
                              _tool_identity(self.valgrind),
                              _valgrind_version(self.valgrind),
                              _tool_identity(str(getattr(sandbox, "python", ""))),
                              str(self.memory_mb), str(self.max_procs),
                              # with or without a per-run cgroup the program starts under
                              # other rlimits and another pid 1, which shifts start-up
                              # counts by ~100 instructions: never mix the two in a cache
                              f"cgroups={getattr(self.sandbox, '_cgroups', None)}",
                              # how runs are launched (pid 1, environment) shifts counts too
                              f"launch={LAUNCH_VERSION}")

    def _cache_key(self, code: str, stdin: str) -> str:
        return _key(code, stdin, self._identity)

    def _load(self, key: str) -> tuple[int, float] | None:
        if key in _INSTR_CACHE:
            return _INSTR_CACHE[key]
        if self.cache_dir is not None:
            try:
                doc = json.loads((self.cache_dir / f"{key}.json").read_text())
                _INSTR_CACHE[key] = (int(doc["count"]), float(doc["wall_s"]))
                return _INSTR_CACHE[key]
            except (OSError, ValueError, KeyError, TypeError):
                return None
        return None

    def _store(self, key: str, count: int, wall_s: float) -> None:
        _INSTR_CACHE[key] = (count, wall_s)
        if self.cache_dir is not None:
            from deciplane.utils import atomic_write_json

            try:
                self.cache_dir.mkdir(parents=True, exist_ok=True)
                atomic_write_json(self.cache_dir / f"{key}.json",
                                  {"count": count, "wall_s": wall_s})
            except OSError:
                pass  # a read-only home only costs a re-measurement

    def run(self, code: str, stdin: str, timeout_s: float) -> RunCost:
        log = f".callgrind-{secrets.token_hex(8)}.log"
        prefix = [self.valgrind, *CALLGRIND_ARGS, f"--log-file={log}"]
        res = self.sandbox.run(code, stdin=stdin, timeout_s=timeout_s, cpu_time_s=timeout_s,
                               memory_mb=self.memory_mb, max_procs=self.max_procs,
                               env=dict(HASH_SEED_ENV), argv_prefix=prefix,
                               collect_files=[log])
        if res.status != "ok":
            return RunCost(None, res, res.status)
        text = res.files.get(log, b"").decode("utf-8", "replace")
        try:
            return RunCost(float(parse_callgrind_log(text)), res)
        except CallgrindLogError as exc:
            return RunCost(None, res, exc.kind, str(exc))

    def count(self, code: str, stdin: str) -> int:
        """Total instructions of a trusted program on ``stdin`` (cached, exact)."""
        key = self._cache_key(code, stdin)
        hit = self._load(key)
        if hit is None:
            rc = self._ref_run(code, stdin, self.ref_timeout_s)
            hit = (int(rc.cost), float(rc.result.wall_time_s))
            self._store(key, *hit)
        return hit[0]

    def _reference_wall_s(self, code: str, stdin: str) -> float:
        hit = self._load(self._cache_key(code, stdin))
        return hit[1] if hit else self.ref_timeout_s / 5

    def baseline(self) -> int:
        """Instructions of an empty program (start-up + shutdown), subtracted from all."""
        return self.count(EMPTY_PROGRAM, "")

    def cost(self, code: str, stdin: str) -> float:
        return R.net_cost(self.count(code, stdin), self.baseline())

    def measure(self, ref_code: str, cand_code: str, stdin: str,
                check: Callable[[str], bool]) -> Measurement:
        base = self.baseline()
        ref_total = self.count(ref_code, stdin)
        ref_wall = self._reference_wall_s(ref_code, stdin)
        cand_timeout = self.slowdown_limit * ref_wall + 30.0
        totals: list[float] = []
        for i in range(self.repeats):
            rc = self.run(cand_code, stdin, cand_timeout)
            failure = rc.failure or (None if check(rc.result.stdout) else "wrong_answer")
            if failure:
                return Measurement(self.name, self.unit, [float(ref_total)], totals,
                                   float("nan"), float("nan"), float("nan"), 1.0, 0.0,
                                   baseline=float(base), failure=failure,
                                   detail=f"candidate run {i + 1} on the optimisation input "
                                          f"under callgrind: {failure}"
                                          + (f" ({rc.detail})" if rc.detail else ""))
            totals.append(rc.cost)
        ref = R.net_cost(ref_total, base)
        cand = R.net_cost(R.median(totals), base)
        raw = R.speedup(ref, cand)
        return Measurement(self.name, self.unit, [float(ref_total)], totals, ref, cand, raw,
                           raw, 0.0, baseline=float(base))


TIMERS = {"cpu": CpuTimer, "instructions": InstructionTimer}


def make_timer(name: str, sandbox: Any, **kwargs: Any) -> Timer:
    """``"cpu"`` or ``"instructions"``; ``kwargs`` go to the timer's constructor."""
    from deciplane.errors import ConfigError

    if name not in TIMERS:
        raise ConfigError(f"timer must be one of {sorted(TIMERS)}, got {name!r}")
    return TIMERS[name](sandbox, **kwargs)


def interleave_order(repeats: int) -> Sequence[tuple[str, str]]:
    """The run order of :class:`CpuTimer`: ``ref, cand`` then ``cand, ref``, alternating
    so that neither program always runs first (warm caches, frequency ramps)."""
    return [("ref", "cand") if i % 2 == 0 else ("cand", "ref") for i in range(repeats)]
