"""Held-out evaluation on more than one process (``eval.workers``).

On a CPU, one process with two torch threads is not twice one with one thread: a
SmolLM2 forward of a 394-token menu prompt takes 0.64 s of wall time on two threads and
1.0 s on one, so two one-thread processes, each playing its own episodes, finish an
evaluation ~1.3x sooner (``benchmarks/bench_eval_workers.py``). Evaluation suits this: its
episodes are independent and the policy is fixed while they run.

:class:`EvalPool` starts ``workers - 1`` helper processes (``spawn``: a forked child would
inherit this process's JVMs and OpenMP state). Each builds the run's policy and algorithm
from the config, with one torch thread, and waits. An evaluation then:

1. sends the policy's trainable tensors (the item head, LoRA adapters; every weight with
   full fine-tuning) to every helper, so that all play the same policy;
2. cuts the evaluation's episode list into small batches at fixed positions
   (:func:`pooled_batch`) and lets this process and the helpers take the next batch as
   each becomes free (:func:`share_batches`), with this process on one thread meanwhile;
3. puts the results back in episode order.

A batch's episodes do not depend on which process plays them, so a greedy evaluation is
the single-process one up to float rounding (another thread count, less padding); a
sampled one (``eval.greedy: false``) draws per batch, so its episodes differ from an
in-process run's (they stay reproducible for a given ``eval.workers``). The time plan's episode limit may shrink
the list while batches run: a batch is cut at the limit when it is taken.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
import traceback
from typing import Any, Callable, Sequence

import torch

from deciplane.errors import ConfigError, DeciplaneError


class EvalWorkerError(DeciplaneError, RuntimeError):
    """A helper process of the evaluation pool failed (its traceback is in the message)."""


def batch_starts(total: int, batch: int) -> list[int]:
    """Start positions of the fixed batches ``[0, batch, 2*batch, ...]`` of ``total``
    episodes."""
    if batch < 1:
        raise ConfigError(f"batch must be >= 1, got {batch}")
    return list(range(0, max(0, total), batch))


def pooled_batch(batch: int, workers: int) -> int:
    """The batch size of a pooled evaluation: ``batch / (2 x workers)`` (at least 1).
    Processes take batches as they become free, so the last one to finish waits at most
    one batch: with the demo's 8-episode batches, 12 episodes split 8 + 4 and the pool
    was slower than one process on two threads (69 s vs 61 s); batches of 2 keep the
    tail short."""
    return max(1, int(batch) // (2 * max(1, int(workers))))


def share_batches(starts: Sequence[int], batch: int, limit: Callable[[], int],
                  runners: Sequence[Callable[[int, int], Any]],
                  on_done: Callable[[int, Any], None] | None = None) -> dict[int, Any]:
    """Play the batches at ``starts`` (each ``[start, start + batch)``, cut at ``limit()``
    when taken; a batch starting at or past the limit is dropped) on ``runners``: each
    runner is called as ``runner(start, stop)`` and returns that batch's result; runner 0
    runs in this thread, the others each in a thread of their own (they wait on a helper
    process). Returns ``{start: result}``. ``on_done(start, result)`` is called after every
    batch, one call at a time. The first exception of any runner is raised once all
    stopped."""
    lock = threading.Lock()
    queue = list(starts)
    results: dict[int, Any] = {}
    errors: list[BaseException] = []

    def take() -> tuple[int, int] | None:
        with lock:
            while queue and not errors:
                start = queue.pop(0)
                stop = min(start + batch, limit())
                if stop > start:
                    return start, stop
            return None

    def loop(run: Callable[[int, int], Any]) -> None:
        try:
            while (span := take()) is not None:
                out = run(*span)
                with lock:
                    results[span[0]] = out
                    if on_done is not None:
                        on_done(span[0], out)
        except BaseException as e:  # noqa: BLE001 - re-raised below, in the caller's thread
            with lock:
                errors.append(e)

    threads = [threading.Thread(target=loop, args=(r,), daemon=True) for r in runners[1:]]
    for t in threads:
        t.start()
    loop(runners[0])
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def trainable_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The tensors that training changes (``requires_grad``), detached: what a helper
    needs besides the weights it loaded itself."""
    return {n: p.detach().cpu() for n, p in model.named_parameters() if p.requires_grad}


def load_trainable_state(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Copy ``state`` (from :func:`trainable_state`) into ``model``'s parameters."""
    named = dict(model.named_parameters())
    missing = sorted(set(state) - set(named))
    if missing:
        raise ConfigError(f"the evaluation helper's model has no parameter {missing[0]!r}: "
                          "it was built from a different config")
    with torch.no_grad():
        for n, t in state.items():
            named[n].copy_(t)


class EvalPool:
    """``workers - 1`` helper processes that play evaluation batches (see the module doc).

    ``target(conn, config_data)`` is each helper's main function (a module-level function:
    ``spawn`` imports it by name): :func:`serve_requests` on the algorithm it builds from
    the config (``deciplane.trainers.run.eval_worker_main``). They start loading at once
    (in the background); the first evaluation waits for them.
    """

    def __init__(self, config: Any, workers: int, target: Callable[[Any, dict], None]
                 ) -> None:
        from deciplane.config import to_dict

        if workers < 2:
            raise ConfigError(f"an EvalPool needs workers >= 2, got {workers}")
        ctx = mp.get_context("spawn")
        self.workers = int(workers)
        self._conns: list[Any] = []
        self._procs: list[Any] = []
        self._ready = False
        self.batches_played = 0
        """Batches the helpers played so far."""
        data = to_dict(config)
        for _ in range(self.workers - 1):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=target, args=(child, data), daemon=True,
                               name="deciplane-eval-worker")
            proc.start()
            child.close()
            self._conns.append(parent)
            self._procs.append(proc)

    def _call(self, conn: Any, *msg: Any) -> Any:
        try:
            conn.send(msg)
            reply = conn.recv()
        except (EOFError, OSError, BrokenPipeError) as e:
            raise EvalWorkerError(f"an evaluation helper process died ({e}); run with "
                                  "eval.workers: 1 to evaluate in this process only") from e
        if reply[0] == "error":
            raise EvalWorkerError(f"an evaluation helper failed:\n{reply[1]}")
        return reply[1] if len(reply) > 1 else None

    def _wait_ready(self) -> None:
        if self._ready:
            return
        for conn in self._conns:
            try:
                reply = conn.recv()
            except (EOFError, OSError) as e:
                raise EvalWorkerError(f"an evaluation helper process died while loading ({e})") from e
            if reply[0] == "error":
                raise EvalWorkerError(f"an evaluation helper could not start:\n{reply[1]}")
        self._ready = True

    def sync(self, model: torch.nn.Module) -> None:
        """Send the policy's trainable tensors to every helper."""
        self._wait_ready()
        state = trainable_state(model)
        for conn in self._conns:
            self._call(conn, "weights", state)

    def runners(self, kind: str, split: str, seeds: Sequence[int], env: str | None = None
                ) -> list[Callable[[int, int], Any]]:
        """One runner per helper for :func:`share_batches`: plays ``seeds[start:stop]``
        with the helper's ``kind`` agent (``Algorithm.eval_spec``), in the suite's env
        ``env`` (its name; None: the run's one env)."""
        def runner(conn: Any) -> Callable[[int, int], Any]:
            def run(start: int, stop: int) -> Any:
                out = self._call(conn, "batch", kind, split, list(seeds[start:stop]), env)
                self.batches_played += 1
                return out
            return run
        return [runner(c) for c in self._conns]

    def close(self) -> None:
        for conn in self._conns:
            try:
                conn.send(("close",))
            except (OSError, BrokenPipeError):
                pass
        for proc in self._procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
        for conn in self._conns:
            conn.close()
        self._conns, self._procs = [], []


def serve_requests(conn: Any, policy: Any, algo: Any) -> None:
    """A helper's loop: answer ``("weights", state)``, ``("batch", kind, split, seeds,
    env)`` and ``("close",)`` from the parent with ``algo`` (built with one thread)."""
    try:
        while True:
            msg = conn.recv()
            try:
                if msg[0] == "close":
                    break
                if msg[0] == "weights":
                    load_trainable_state(policy.model, msg[1])
                    conn.send(("ok",))
                elif msg[0] == "batch":
                    _, kind, split, seeds, env = msg
                    agent, collect = algo.eval_spec(kind)
                    suite = algo.suite if env is None else algo.suite.member(env)
                    conn.send(("ok", suite.play_batch(agent, split, seeds, collect)))
                else:
                    conn.send(("error", f"unknown request {msg[0]!r}"))
            except BaseException:  # noqa: BLE001 - reported to the parent, which raises
                conn.send(("error", traceback.format_exc()))
    finally:
        algo.close()
        conn.close()


def start_eval_pool(config: Any, target: Callable[[Any, dict], None]) -> EvalPool | None:
    """The pool ``config.eval.workers`` asks for, or None (1 worker, or a data-parallel
    run: there every rank already evaluates with its own process)."""
    from deciplane.engine import distributed

    workers = int(getattr(config.eval, "workers", 1) or 1)
    if workers < 2:
        return None
    if distributed.launched():
        raise ConfigError("eval.workers > 1 cannot be combined with a data-parallel launch "
                          "(accelerate launch / torchrun); set eval.workers: 1")
    return EvalPool(config, workers, target)


__all__ = ["EvalPool", "EvalWorkerError", "batch_starts", "load_trainable_state",
           "pooled_batch", "serve_requests", "share_batches", "start_eval_pool",
           "trainable_state"]
