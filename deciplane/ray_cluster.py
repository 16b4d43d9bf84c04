"""Ray, the optional engine behind :class:`~deciplane.vector.ray_env.RayVectorEnv` and
:class:`~deciplane.sandbox.remote.RaySandbox`: import it with a clear error, and
start or join a cluster.

Ray is an optional extra: ``pip install 'deciplane[ray]'``.
"""

from __future__ import annotations

import os
from typing import Any

from deciplane.errors import ConfigError

INSTALL_HINT = "pip install 'deciplane[ray]'  (or: pip install 'ray>=2.9')"


def require_ray() -> Any:
    """The ``ray`` module, or a :class:`ConfigError` that says how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise ConfigError("env_workers backend 'ray' needs the Ray package, which is not "
                          f"installed: {INSTALL_HINT}") from exc
    return ray


def ensure_ray(address: str | None = None, num_cpus: int | None = None,
               **init_kwargs: Any) -> Any:
    """Connect to Ray once per process and return the module.

    * already initialised (``ray.init`` called by the user): used as is;
    * ``address`` (or the ``RAY_ADDRESS`` variable, e.g. ``"auto"`` or ``"10.0.0.1:6379"``):
      join that cluster;
    * otherwise: start a private single-machine instance with ``num_cpus`` CPUs (default:
      all), without the dashboard (the dashboard/Jobs API accepts code from anyone who
      reaches its port).
    """
    ray = require_ray()
    if ray.is_initialized():
        return ray
    address = address or os.environ.get("RAY_ADDRESS") or None
    kw: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True}
    kw.update(init_kwargs)
    if address:
        kw.pop("include_dashboard", None)
        ray.init(address=address, **kw)
    else:
        ray.init(num_cpus=num_cpus, **kw)
    return ray


def ray_status() -> tuple[bool, str]:
    """``(installed, details)`` for ``deciplane doctor``: Ray's version, or how to get it."""
    try:
        import ray
    except ImportError:
        return False, f"not installed (optional: env_workers backend 'ray'): {INSTALL_HINT}"
    except Exception as exc:  # noqa: BLE001 - a broken install must not break doctor
        return False, f"installed but does not import: {type(exc).__name__}: {exc}"
    where = "connected" if ray.is_initialized() else "not started by this process"
    return True, f"ray {ray.__version__} ({where}; RAY_ADDRESS={os.environ.get('RAY_ADDRESS') or 'unset'})"
