"""``deciplane serve ENV_ID``: any registered environment as an OpenEnv server."""

from __future__ import annotations

from typing import Optional

import typer

from deciplane.cli.evaluate import _friendly_errors, parse_options


def serve_cmd(
    env_id: str = typer.Argument(..., help="registered environment id (`deciplane envs`)"),
    env_option: Optional[list[str]] = typer.Option(None, "--env-option", "-e",
                                                    help="KEY=VALUE passed to gym.make"),
    host: str = typer.Option("127.0.0.1", help="address to bind (localhost by default: a "
                                               "served code env runs the client's programs)"),
    port: int = typer.Option(8000, help="port"),
    max_sessions: int = typer.Option(4, help="concurrent sessions (one env each)"),
    session_timeout: float = typer.Option(600.0, help="seconds before an idle session's env "
                                                      "is closed"),
    expose_expert: bool = typer.Option(False, help="serve the expert's actions (train split "
                                                   "only)"),
    export: Optional[str] = typer.Option(None, help="write the folder `openenv build` expects "
                                                    "into this directory instead of serving"),
) -> None:
    """Serve ENV_ID as an OpenEnv environment (WebSocket sessions at /ws; TRL, SkyRL and
    verifiers reach it through their OpenEnv clients). Needs the optional extra
    named interop (pip install 'deciplane' with it)."""
    with _friendly_errors():
        try:
            from deciplane.interop import openenv as oe
        except ImportError as e:
            raise typer.BadParameter(str(e)) from None
        kwargs = parse_options(env_option)
        if export:
            folder = oe.write_openenv_folder(export, env_id, kwargs, max_sessions=max_sessions,
                                             port=port)
            print(f"wrote {folder} (check it with: openenv validate {folder} --level static "
                  "--skip-build)")
            return
        oe.serve(env_id, kwargs, host=host, port=port, max_sessions=max_sessions,
                 session_timeout_s=session_timeout, expose_expert=expose_expert)


def register(app: typer.Typer) -> None:
    app.command("serve")(serve_cmd)


__all__ = ["register", "serve_cmd"]
