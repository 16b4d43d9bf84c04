"""The ``docker`` backend: one container per run, from a locally built image (no pulls).

The image is a few-kilobyte root filesystem made here and loaded with ``docker import``
(cached by a tag that hashes its contents): empty mount points, a passwd/group that know
only root and nobody, and merged-``/usr`` symlinks. The host's system directories are
mounted into the container read-only at run time, so the container runs the same
``python3`` as the other backends. Each container: no network, read-only root, uid/gid
65534, every capability dropped, ``no-new-privileges``, Docker's default seccomp profile,
pids and memory (+swap) limits, a size-capped ``/tmp`` tmpfs, the run's scratch dir as
the only writable host path, and ``sh`` as pid 1 (the program's parent; everything
else dies with it). The engine is
``$DECIPLANE_DOCKER_HOST`` (e.g. ``unix:///tmp/deciplane-docker.sock``), else
``$DOCKER_HOST``, else the default socket.
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import selectors
import socket
import struct
import tarfile
import time
from pathlib import Path
from typing import Any

from deciplane.sandbox.host import find_python, python_ro_paths, system_ro_paths
from deciplane.sandbox.limits import NOBODY, SCRATCH, Limits, prlimit_argv
from deciplane.sandbox.results import RawRun
from deciplane.sandbox.scratch import collect, make_scratch, remove_scratch
from deciplane.errors import BackendUnavailable

NAME = "docker"
IMAGE_REPO = "deciplane-sandbox"
LABEL = "org.deciplane.sandbox"


def docker_host() -> str | None:
    return os.environ.get("DECIPLANE_DOCKER_HOST") or os.environ.get("DOCKER_HOST") or None


def _client(timeout: int = 30):  # noqa: ANN202
    try:
        import docker
    except ImportError as exc:  # pragma: no cover - docker is a dependency
        raise BackendUnavailable("the docker Python SDK is not installed; "
                                 "`pip install docker`") from exc
    host = docker_host()
    return docker.DockerClient(base_url=host, timeout=timeout) if host else \
        docker.from_env(timeout=timeout)


@functools.lru_cache(maxsize=1)
def available() -> tuple[bool, str]:
    """Reachable engine + the sandbox image (built on first use) + one real container."""
    host = docker_host() or "the default socket (unix:///var/run/docker.sock)"
    try:
        client = _client(timeout=10)
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any failure means "not reachable"
        return False, (f"no Docker engine reachable at {host} ({type(exc).__name__}); start "
                       "dockerd and set DECIPLANE_DOCKER_HOST (see .ci/run)")
    try:
        tag = ensure_image(client)
        client.close()
    except Exception as exc:  # noqa: BLE001
        return False, f"Docker engine at {host} cannot build the sandbox image: {exc}"
    return True, f"engine at {host}, image {tag} (built locally, no pulls)"


def rootfs_tar() -> bytes:
    """The image's root filesystem as a tar (deterministic: fixed mtimes, sorted)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        def add(name: str, kind: bytes, mode: int, data: bytes = b"", link: str = "") -> None:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime, info.uid, info.gid = kind, mode, 0, 0, 0
            info.linkname = link
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data else None)

        for d in ("usr", "etc", "dev", "proc", "sys", "tmp", "sandbox", "run"):
            add(d, tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755)
        for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            if os.path.islink(f"/{name}"):
                add(name, tarfile.SYMTYPE, 0o777, link=os.readlink(f"/{name}"))
            elif os.path.isdir(f"/{name}"):
                add(name, tarfile.DIRTYPE, 0o755)
        add("etc/passwd", tarfile.REGTYPE, 0o644,
            f"root:x:0:0:root:/root:/usr/sbin/nologin\n"
            f"nobody:x:{NOBODY}:{NOBODY}:nobody:{SCRATCH}:/usr/sbin/nologin\n".encode())
        add("etc/group", tarfile.REGTYPE, 0o644, f"root:x:0:\nnogroup:x:{NOBODY}:\n".encode())
        for src in ("/etc/ld.so.cache", "/etc/localtime"):
            if os.path.isfile(src):
                add(src.lstrip("/"), tarfile.REGTYPE, 0o644, Path(src).read_bytes())
    return buf.getvalue()


def ensure_image(client: Any) -> str:
    """Import the sandbox image unless an image with the same content tag exists."""
    data = rootfs_tar()
    tag = f"{IMAGE_REPO}:{hashlib.sha256(data).hexdigest()[:12]}"
    try:
        client.images.get(tag)
        return tag
    except Exception:  # noqa: BLE001 - docker.errors.ImageNotFound
        pass
    repo, version = tag.split(":")
    client.api.import_image_from_data(data, repository=repo, tag=version,
                                      changes=[f"LABEL {LABEL}=1", f"WORKDIR {SCRATCH}"])
    client.images.get(tag)  # raises if the import failed
    return tag


def _mounts(python: str, scratch: str) -> dict[str, dict[str, str]]:
    """Host paths bound into the container: the system directories read-only (merged-/usr
    symlinks such as /bin -> usr/bin are part of the image), the scratch dir read-write."""
    vols: dict[str, dict[str, str]] = {}
    for path in system_ro_paths() + python_ro_paths(python):
        if not os.path.islink(path):
            vols[path] = {"bind": path, "mode": "ro"}
    vols[scratch] = {"bind": SCRATCH, "mode": "rw"}
    return vols


class DockerRunner:
    """Runs one program per container; see the module docstring."""

    def __init__(self) -> None:
        self.client = _client(timeout=60)
        self.image = ensure_image(self.client)
        self.python = find_python()

    def run(self, code: str, stdin: bytes, files, limits: Limits,  # noqa: ANN001
            env: dict[str, str], prefix: list[str], collect_files: list[str] | None
            ) -> tuple[RawRun, dict[str, bytes]]:
        scratch = make_scratch(code, files, owner=NOBODY)
        try:
            raw = self._run(str(scratch), stdin, limits, env, prefix)
            got = collect(scratch, collect_files, limits.max_file_bytes)
        finally:
            remove_scratch(scratch)
        return raw, got

    def _run(self, scratch: str, stdin: bytes, limits: Limits, env: dict[str, str],
             prefix: list[str]) -> RawRun:
        api = self.client.api
        mem = (int(limits.memory_mb) + 64) << 20
        host_config = api.create_host_config(
            binds=_mounts(self.python, scratch), network_mode="none", read_only=True,
            tmpfs={"/tmp": "rw,nosuid,nodev,size=64m,mode=1777"},
            pids_limit=int(limits.max_procs) + 2, mem_limit=mem, memswap_limit=mem,
            cap_drop=["ALL"], security_opt=["no-new-privileges"],
            ipc_mode="private", log_config={"type": "none", "config": {}},
            oom_kill_disable=False)
        # sh stays pid 1 (waits for the program; orphans die with the container), so no
        # docker-init is needed on the engine's side. Processes: pids_limit, per container
        # (no RLIMIT_NPROC: it would count uid 65534 across all containers).
        command = (["/bin/sh", "-c", '"$@"', "sh"]
                   + prlimit_argv(limits.rlimits(address_space=not prefix, nproc=False))
                   + list(prefix) + [self.python, "main.py"])
        raw = RawRun()
        try:
            cid = api.create_container(
                self.image, command=command, user=f"{NOBODY}:{NOBODY}",
                working_dir=SCRATCH, environment=env, stdin_open=True,
                tty=False, network_disabled=True, hostname="sandbox", labels={LABEL: "1"},
                host_config=host_config)["Id"]
        except Exception as exc:  # noqa: BLE001
            raw.sandbox_failed = f"docker could not create the container: {exc}"
            return raw
        sock = None
        try:
            sock = api.attach_socket(cid, params={"stdin": 1, "stdout": 1, "stderr": 1,
                                                  "stream": 1})
            raw_sock = _raw_socket(sock)
            stats = _CgroupSampler(cid)
            t0 = time.monotonic()
            api.start(cid)
            self._pump(raw_sock, stdin, limits, raw, t0, stats.sample)
            stats.sample()
            raw.wall_time_s = time.monotonic() - t0
            # Stop reading first: docker will not finish a container whose attached
            # output it cannot deliver.
            _close(sock, raw_sock)
            sock = None
            if raw.timed_out or raw.output_exceeded:
                try:
                    api.kill(cid)
                except Exception:  # noqa: BLE001 - it may have exited meanwhile
                    pass
            result = api.wait(cid, timeout=30)
            stats.sample()
            state = api.inspect_container(cid)["State"]
            raw.returncode = int(result.get("StatusCode", state.get("ExitCode", -1)))
            raw.oom = bool(state.get("OOMKilled"))
            if state.get("Error"):
                raw.sandbox_failed = f"docker: {state['Error']}"
            raw.cpu_time_s, raw.peak_memory_mb = stats.cpu_s, stats.peak_mb
        except Exception as exc:  # noqa: BLE001
            raw.sandbox_failed = raw.sandbox_failed or f"docker run failed: {exc}"
        finally:
            if sock is not None:
                _close(sock, _raw_socket(sock))
            try:
                api.remove_container(cid, force=True)
            except Exception:  # noqa: BLE001
                pass
        return raw

    def _pump(self, sock: socket.socket, stdin: bytes, limits: Limits, raw: RawRun,
              t0: float, sample) -> None:  # noqa: ANN001
        """Send stdin, demultiplex stdout/stderr frames up to the caps, stop at the
        deadline. Docker frames: 1 byte stream id, 3 zero bytes, 4 bytes length."""
        cap = limits.max_output_bytes
        bufs = {1: bytearray(), 2: bytearray()}
        pending = memoryview(stdin)
        sock.setblocking(False)
        sel = selectors.DefaultSelector()
        sel.register(sock, selectors.EVENT_READ | (selectors.EVENT_WRITE if pending else 0))
        if not pending:
            sock.shutdown(socket.SHUT_WR)
        data = bytearray()
        deadline = t0 + limits.timeout_s
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raw.timed_out = True
                    break
                events = sel.select(timeout=min(remaining, 0.02))
                sample()
                closed = False
                for _key, mask in events:
                    if mask & selectors.EVENT_WRITE and pending:
                        try:
                            n = sock.send(pending[:65536])
                            pending = pending[n:]
                        except (BlockingIOError, InterruptedError):
                            n = 0
                        except OSError:
                            pending = pending[:0]
                        if not pending:
                            sock.shutdown(socket.SHUT_WR)
                            sel.modify(sock, selectors.EVENT_READ)
                    if mask & selectors.EVENT_READ:
                        try:
                            chunk = sock.recv(1 << 16)
                        except (BlockingIOError, InterruptedError):
                            continue
                        if not chunk:
                            closed = True
                        data += chunk
                while len(data) >= 8:
                    stream, size = data[0], struct.unpack(">I", data[4:8])[0]
                    if len(data) < 8 + size:
                        break
                    payload = bytes(data[8:8 + size])
                    del data[:8 + size]
                    buf = bufs.get(stream)
                    if buf is None:
                        continue
                    room = cap - len(buf)
                    buf += payload[:max(room, 0)]
                    if len(payload) > room:
                        raw.output_exceeded = True
                if raw.output_exceeded or closed:
                    break
        finally:
            sel.close()
            raw.stdout, raw.stderr = bytes(bufs[1]), bytes(bufs[2])


def _raw_socket(sock: Any) -> socket.socket:
    """The real socket under docker-py's attach wrapper."""
    inner = getattr(sock, "_sock", sock)
    return inner if isinstance(inner, socket.socket) else sock


def _close(sock: Any, raw_sock: socket.socket) -> None:
    """Close the attach stream for real (the SDK wrapper alone keeps the fd open)."""
    for fn in (lambda: raw_sock.shutdown(socket.SHUT_RDWR), raw_sock.close, sock.close):
        try:
            fn()
        except OSError:
            pass


class _CgroupSampler:
    """CPU seconds and peak memory (MB) of a running container, sampled from its cgroup
    (v1 ``<controller>/docker/<id>``, v2 ``system.slice/docker-<id>.scope``) while it
    runs: docker keeps no usage once a container has exited, so the CPU time is the last
    sample (a lower bound by at most one sampling interval, 20 ms)."""

    def __init__(self, cid: str) -> None:
        root = Path("/sys/fs/cgroup")
        v2 = root / "system.slice" / f"docker-{cid}.scope"
        self.cpu_files = [(root / "cpuacct/docker" / cid / "cpuacct.usage", 1e-9),
                          (root / "cpu,cpuacct/docker" / cid / "cpuacct.usage", 1e-9)]
        self.mem_files = [root / "memory/docker" / cid / "memory.max_usage_in_bytes",
                          v2 / "memory.peak"]
        self.v2_cpu = v2 / "cpu.stat"
        self.cpu_s = 0.0
        self.peak_mb = 0.0

    def sample(self) -> None:
        for path, scale in self.cpu_files:
            try:
                self.cpu_s = max(self.cpu_s, int(path.read_text()) * scale)
            except (OSError, ValueError):
                pass
        try:
            for line in self.v2_cpu.read_text().splitlines():
                if line.startswith("usage_usec"):
                    self.cpu_s = max(self.cpu_s, int(line.split()[1]) / 1e6)
        except (OSError, ValueError, IndexError):
            pass
        for path in self.mem_files:
            try:
                self.peak_mb = max(self.peak_mb, int(path.read_text()) / (1 << 20))
            except (OSError, ValueError):
                pass
