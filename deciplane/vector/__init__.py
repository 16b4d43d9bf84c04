"""Environment workers: many environments stepped in parallel behind the
``gymnasium.vector`` interface.

:class:`~deciplane.vector.ray_env.RayVectorEnv` runs blocks of sub-envs in Ray actors (one
process each, on any node of a cluster), with deadlines and worker replacement;
:mod:`~deciplane.ray_cluster` imports Ray with a clear error and starts or joins a
cluster. Ray is an optional extra: ``pip install 'deciplane[ray]'``; importing this package
does not import Ray.
"""

from __future__ import annotations

from deciplane.vector.ray_env import (DROPPED_KEY, ON_FAILURE, EnvSpec, RayVectorEnv,
                                      make_ray_vector_env)

__all__ = ["DROPPED_KEY", "ON_FAILURE", "EnvSpec", "RayVectorEnv", "make_ray_vector_env"]
