"""Sandboxed runs as Ray tasks: code execution scales with the cluster.

```python
from deciplane.sandbox.remote import RaySandbox
sb = RaySandbox()                          # joins RAY_ADDRESS, else a local Ray instance
sb.run("print(input()[::-1])", stdin="abc\\n").stdout      # 'cba\\n', run on a worker
results = sb.run_many([{"code": src, "stdin": case} for case in cases])   # in parallel
env = gym.make("deciplane/CodeOpt-v0", sandbox=sb)         # CodeOpt rewards on the cluster
```

Each run is one Ray task that builds a :class:`deciplane.envs.Sandbox` *on the node that
executes it* and calls its ``run``: the containment is that node's sandbox backend (bwrap,
docker or namespace — ``backend`` picks it as for ``Sandbox``), never the Ray worker
process itself and never the driver. A node without a working backend fails the task
with :class:`deciplane.errors.BackendUnavailable`, as ``Sandbox`` does locally; it never
falls back to running code unsandboxed.

``RaySandbox`` has ``Sandbox``'s ``run`` signature and ``backend`` attribute, so anything
that takes a sandbox object (``CodeOptEnv(sandbox=...)``, the CodeOpt timers and
evaluators) can use it. Timings measured by the ``cpu``/``wall`` timers then mix nodes;
the ``instructions`` timer (valgrind instruction counts) does not depend on the node.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

from deciplane.ray_cluster import ensure_ray
from deciplane.errors import SandboxError

_SANDBOXES: dict[str, Any] = {}   # per worker process: one Sandbox per backend name


def _run_on_worker(backend: str, kwargs: dict[str, Any]) -> Any:
    """Body of the Ray task: a (cached) ``Sandbox(backend)`` of this node runs the code."""
    from deciplane.sandbox import Sandbox

    sb = _SANDBOXES.get(backend)
    if sb is None:
        sb = _SANDBOXES[backend] = Sandbox(backend)
    return sb.run(**kwargs)


def _probe_on_worker(backend: str) -> dict[str, Any]:
    from deciplane.sandbox import Sandbox

    sb = _SANDBOXES.get(backend)
    if sb is None:
        sb = _SANDBOXES[backend] = Sandbox(backend)
    return {"backend": sb.backend, "cgroups": bool(sb._cgroups), "pid": os.getpid()}


_TASKS: dict[str, Any] = {}


def _tasks(ray: Any) -> tuple[Any, Any]:
    if "run" not in _TASKS:
        # max_retries=0: a sandboxed program is not retried behind the caller's back (it
        # may have been what killed the worker); the caller sees the error.
        _TASKS["run"] = ray.remote(max_retries=0)(_run_on_worker)
        _TASKS["probe"] = ray.remote(max_retries=0)(_probe_on_worker)
    return _TASKS["run"], _TASKS["probe"]


class RaySandbox:
    """``Sandbox.run`` as Ray tasks on the cluster's nodes (see the module docstring).

    Arguments:
        backend: the sandbox backend each node uses (``"auto"``: its strongest).
        num_cpus: Ray CPUs reserved per run (1: at most one run per core).
        timeout_margin_s: extra seconds, beyond the run's own ``timeout_s``, that the
            driver waits for a task (queueing, scheduling) before
            :class:`deciplane.errors.SandboxError`.
        ray_address: cluster to join (default ``RAY_ADDRESS``, else a local instance).
    """

    def __init__(self, backend: str = "auto", num_cpus: float = 1.0,
                 timeout_margin_s: float = 120.0, ray_address: str | None = None) -> None:
        self._ray = ensure_ray(ray_address)
        self.requested_backend = backend
        self.num_cpus = float(num_cpus)
        self.timeout_margin_s = float(timeout_margin_s)
        self._run, probe = _tasks(self._ray)
        # the backend of one worker node, for reports and cache keys (CodeOpt timers)
        info = self._get(probe.options(num_cpus=self.num_cpus).remote(backend),
                         self.timeout_margin_s)
        self.backend: str = info["backend"]
        self._cgroups = info["cgroups"]

    def __repr__(self) -> str:
        return f"RaySandbox(backend={self.backend!r})"

    def _get(self, ref: Any, timeout: float) -> Any:
        ray = self._ray
        try:
            return ray.get(ref, timeout=timeout)
        except ray.exceptions.RayTaskError as exc:   # BackendUnavailable, ConfigError...
            raise exc.as_instanceof_cause() from None
        except ray.exceptions.GetTimeoutError as exc:
            ray.cancel(ref, force=True)
            raise SandboxError(f"a remote sandbox run did not finish within {timeout:.0f} s "
                               "(queued behind other tasks, or a node is stuck); raise "
                               "timeout_margin_s or add CPUs") from exc
        except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError,
                ray.exceptions.NodeDiedError) as exc:
            raise SandboxError(f"the Ray worker running a sandboxed program died: {exc}"
                               ) from exc

    def submit(self, code: str, **kwargs: Any) -> Any:
        """Start one run; returns a Ray ``ObjectRef`` of its ``SandboxResult``."""
        kwargs["code"] = code
        return self._run.options(num_cpus=self.num_cpus).remote(self.requested_backend, kwargs)

    def _deadline(self, kwargs: dict[str, Any]) -> float:
        return float(kwargs.get("timeout_s", 2.0)) + self.timeout_margin_s

    def run(self, code: str, **kwargs: Any) -> Any:
        """Same arguments and result as :meth:`deciplane.envs.Sandbox.run`."""
        return self._get(self.submit(code, **kwargs), self._deadline(kwargs))

    def run_many(self, runs: Sequence[dict[str, Any]]) -> list[Any]:
        """Many runs at once (each a dict of ``Sandbox.run`` arguments, ``code`` included),
        spread over the cluster; results in the order given."""
        runs = [dict(r) for r in runs]
        refs = [self.submit(r.pop("code"), **r) for r in runs]
        # every task may wait for the ones queued before it: the deadline grows with the
        # queue, bounded by the sum of the runs' own limits
        total = sum(float(r.get("timeout_s", 2.0)) for r in runs) + self.timeout_margin_s
        return [self._get(ref, total) for ref in refs]


__all__ = ["RaySandbox"]
