"""Run by test_verifiers.py with .venv-verifiers/bin/python (verifiers 0.4 cannot be
installed in the main venv): verifiers' own CLI (`vf-eval deciplane-verifiers ...`, in its
own process) loads deciplane's environment package by its taskset id and plays two
TextWorld-Express games with its own rollout code (the `null` chat harness, its
interception server and eval client) against a local OpenAI-compatible policy stub on
127.0.0.1, which stands in for a model server:

* game 0: the stub answers with the expert's command. It is stateless: it replays the
  conversation's earlier replies on a twin env built with ``expert=True`` and answers that
  env's ``expert_command``;
* game 1: it answers "dance wildly", which is on no menu.

The stub tells the games apart by the first observation. The env verifiers plays is built
with ``expert=True`` too, so that its info holds the expert's fields: none may reach the
model. Prints one JSON line: per game, the episode's reward, metrics and info from
verifiers' ``traces.jsonl``; the twin's return for the expert episode; every request the
stub saw.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import gymnasium as gym

import deciplane  # noqa: F401
from deciplane.interop.common import menu_choice

ENV_ID = "deciplane/TextWorldExpress-v0"
KWARGS = {"game": "twc", "game_params": "numLocations=1,numItemsToPutAway=1",
          "split": "train"}
EXPERT_GAME, OFF_MENU_GAME = 0, 1
MAX_TURNS = 3            # the off-menu episode stops here
OFF_MENU = "dance wildly"

SEEN: list[dict] = []
FIRST_OBS: dict[str, int] = {}      # first observation -> game


def first_observation(game: int) -> str:
    twin = gym.make(ENV_ID, **KWARGS)
    try:
        return twin.reset(seed=game, options={"game": game})[0]
    finally:
        twin.close()


def expert_reply(game: int, messages: list[dict]) -> str:
    """The expert's command after the conversation's replies so far."""
    twin = gym.make(ENV_ID, expert=True, **KWARGS)
    try:
        _, info = twin.reset(seed=game, options={"game": game})
        for m in messages:
            if m.get("role") == "assistant":
                _, _, _, _, info = twin.step(menu_choice(_text(m), info["menu"]))
        return info["expert_command"]
    finally:
        twin.close()


def expert_return(game: int) -> tuple[float, int]:
    """The return and length of the expert's episode of ``game``."""
    twin = gym.make(ENV_ID, expert=True, **KWARGS)
    try:
        _, info = twin.reset(seed=game, options={"game": game})
        total, steps, done = 0.0, 0, False
        while not done:
            _, r, term, trunc, info = twin.step(info["expert_action"])
            total, steps, done = total + float(r), steps + 1, term or trunc
        return total, steps
    finally:
        twin.close()


def _text(message: dict) -> str:
    content = message.get("content") or ""
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


class Policy(BaseHTTPRequestHandler):
    def log_message(self, *args):          # quiet
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        SEEN.append(body)
        messages = body.get("messages", [])
        first = next(_text(m) for m in messages if m.get("role") == "user")
        game = next(g for obs, g in FIRST_OBS.items() if first.startswith(obs))
        text = expert_reply(game, messages) if game == EXPERT_GAME else OFF_MENU
        usage = {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}
        base = {"id": f"stub-{len(SEEN)}", "created": int(time.time()),
                "model": body.get("model")}
        if body.get("stream"):
            chunks = [
                {**base, "object": "chat.completion.chunk", "choices": [
                    {"index": 0, "delta": {"role": "assistant", "content": text},
                     "finish_reason": None}]},
                {**base, "object": "chat.completion.chunk", "choices": [
                    {"index": 0, "delta": {}, "finish_reason": "stop"}]},
                {**base, "object": "chat.completion.chunk", "choices": [], "usage": usage},
            ]
            payload = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks)
            payload += "data: [DONE]\n\n"
            data, kind = payload.encode(), "text/event-stream"
        else:
            data = json.dumps({**base, "object": "chat.completion", "usage": usage,
                               "choices": [{"index": 0, "finish_reason": "stop",
                                            "message": {"role": "assistant",
                                                        "content": text}}]}).encode()
            kind = "application/json"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def vf_eval(url: str, out: Path) -> dict:
    """One `vf-eval` run of both games; each game's trace, by game."""
    vf_eval_bin = str(Path(sys.executable).parent / "vf-eval")
    argv = [vf_eval_bin, "deciplane-verifiers",
            "--env.taskset.env-id", ENV_ID,
            "--env.taskset.env-kwargs", json.dumps({**KWARGS, "expert": True}),
            "--env.taskset.first-task", "0", "--env.taskset.num-tasks", "2",
            "--env.taskset.max-turns", str(MAX_TURNS),
            "--client.base-url", f"{url}/v1", "-m", "stub-policy", "-c", "2",
            "--no-push", "--no-rich", "-o", str(out), "--run.name", "stub"]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=240)
    if res.returncode != 0:
        raise SystemExit(f"vf-eval exited {res.returncode}:\n{res.stdout[-3000:]}\n"
                         f"{res.stderr[-3000:]}")
    by_game = {}
    for line in (out / "stub" / "traces.jsonl").read_text().splitlines():
        episode = json.loads(line)
        (t,) = episode["traces"]
        data = episode["task"]["data"]
        by_game[data["seed"]] = {
            "ok": episode.get("ok"), "errors": episode.get("errors"),
            "trace_errors": t.get("errors"), "rewards": t.get("rewards"),
            "reward": sum(r["score"] * r.get("weight", 1.0)
                          for r in (t.get("rewards") or {}).values() if r),
            "metrics": t.get("metrics"), "info": t.get("info"),
            "stop": t.get("stop_condition"), "task": data.get("name")}
    return by_game


def main() -> None:
    for game in (EXPERT_GAME, OFF_MENU_GAME):
        FIRST_OBS[first_observation(game)] = game
    server = ThreadingHTTPServer(("127.0.0.1", 0), Policy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    with tempfile.TemporaryDirectory() as tmp:
        try:
            t0 = time.time()
            games = vf_eval(url, Path(tmp))
            seconds = round(time.time() - t0, 1)
        finally:
            server.shutdown()
    twin_return, twin_steps = expert_return(EXPERT_GAME)
    print(json.dumps({"expert": games[EXPERT_GAME], "off_menu": games[OFF_MENU_GAME],
                      "vf_eval_s": seconds, "twin_return": twin_return,
                      "twin_steps": twin_steps, "max_turns": MAX_TURNS,
                      "off_menu_reply": OFF_MENU, "requests": SEEN}))


if __name__ == "__main__":
    main()
