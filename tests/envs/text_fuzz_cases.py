"""Fuzz cases for text actions, and the subprocess runner of tests/envs/test_text_fuzz.py.

Run as ``python -m tests.envs.text_fuzz_cases ENV_ID KWARGS_JSON N SEED``: builds the
environment once (or prints ``skip <reason>``: it cannot be built here with a typed error,
or its action space is not text), then for each of N cases resets it and steps with the
case. Before each
case it prints ``start <i> <kind>``; after it, one JSON line with the outcome (a typed
error, or the reward and the flags). A crash of the interpreter (a segfault in an engine)
or a hang therefore shows as the last ``start`` line without its result.
"""

from __future__ import annotations

import json
import math
import random
import sys
import time
from typing import Any

#: kind -> whether the environment must refuse the content (``info["action_rejected"]``)
KINDS = {
    "nul": True,            # NUL bytes inside a command (segfaulted TextWorld)
    "nul_only": True,       # "\x00" (hung TextWorld at 100% CPU)
    "control": True,        # other C0 / DEL / C1 control characters
    "escape_seq": True,     # terminal escape sequences
    "surrogate": True,      # lone surrogates (text decoded with surrogateescape)
    "bytes_str": None,      # random bytes decoded with surrogateescape (mostly refused)
    "huge": True,           # 2,000,000 characters
    "unicode": None,        # random printable code points from every plane
    "whitespace": False,    # tabs, newlines and carriage returns: legal text
    "empty": None,
    "ascii": False,         # random printable ASCII words
    "program": False,       # a small Python program with tabs and newlines
    "utf8_bytes": "either",  # UTF-8 bytes: decoded where accepted, else InvalidAction
    "bad_bytes": "error",   # bytes that are not UTF-8: a typed error
    "wrong_type": "error",  # int, None, float, list: a typed error (InvalidAction)
}
# refused everywhere (vertical tab and form feed are legal in programs)
_CONTROLS = [chr(c) for c in [*range(0, 9), *range(0x0E, 0x20), 0x7F, *range(0x80, 0xA0)]]


def _printable_unicode(rng: random.Random, n: int) -> str:
    out = []
    while len(out) < n:
        c = chr(rng.choice([rng.randrange(0x20, 0x7F), rng.randrange(0xA0, 0x3000),
                            rng.randrange(0x4E00, 0xA000), rng.randrange(0x1F300, 0x1FA00),
                            rng.randrange(0x10000, 0x10FFFF)]))
        if c.isprintable():
            out.append(c)
    return "".join(out)


def make_case(kind: str, rng: random.Random) -> Any:
    words = ["look", "go", "east", "take", "open", "1", "42", "\\boxed{7}", "print(1)"]
    base = " ".join(rng.choice(words) for _ in range(rng.randrange(1, 4)))
    pos = rng.randrange(len(base) + 1)
    if kind == "nul":
        return base[:pos] + "\x00" * rng.randrange(1, 4) + base[pos:]
    if kind == "nul_only":
        return "\x00" * rng.randrange(1, 3)
    if kind == "control":
        return base[:pos] + rng.choice(_CONTROLS) + base[pos:]
    if kind == "escape_seq":
        return "\x1b[31m" + base + "\x1b[0m"
    if kind == "surrogate":
        return base[:pos] + chr(rng.randrange(0xD800, 0xE000)) + base[pos:]
    if kind == "bytes_str":
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64))).decode(
            "utf-8", errors="surrogateescape")
    if kind == "huge":
        return rng.choice(["a", "1", " ", "\\boxed{"]) * 2_000_000
    if kind == "unicode":
        return _printable_unicode(rng, rng.randrange(1, 80))
    if kind == "whitespace":
        return base.replace(" ", rng.choice(["\t", "\n", "\r\n", " \t "]))
    if kind == "empty":
        return rng.choice(["", " ", "\n"])
    if kind == "ascii":
        return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789 -'.,") for _ in
                       range(rng.randrange(1, 60)))
    if kind == "program":
        return "import sys\nfor line in sys.stdin:\n\tprint(line.strip())\n"
    if kind == "utf8_bytes":
        return base.encode()
    if kind == "bad_bytes":
        return b"\xff\xfe" + base.encode() + b"\x80"
    if kind == "wrong_type":
        return rng.choice([7, None, 1.5, ["look"], {"a": 1}])
    raise ValueError(kind)


def cases(n: int, seed: int) -> list[tuple[str, Any]]:
    """``n`` cases, every kind at least once when ``n >= len(KINDS)``, then random kinds."""
    rng = random.Random(seed)
    kinds = list(KINDS)
    order = kinds[:n] + [rng.choice(kinds) for _ in range(max(0, n - len(kinds)))]
    return [(k, make_case(k, rng)) for k in order]


def main(env_id: str, kwargs_json: str, n: int, seed: int) -> None:
    from gymnasium import spaces

    import deciplane.envs as envs
    from deciplane.errors import DeciplaneError

    try:
        env = envs.make(env_id, disable_env_checker=True, **json.loads(kwargs_json))
    except DeciplaneError as exc:  # no sandbox backend, data not installed...
        print(f"skip {env_id} cannot be built here ({type(exc).__name__}: {exc})", flush=True)
        return
    if not isinstance(env.action_space, spaces.Text):
        print(f"skip {env_id}: action space {env.action_space} is not text", flush=True)
        env.close()
        return
    for i, (kind, action) in enumerate(cases(n, seed)):
        print(f"start {i} {kind}", flush=True)
        env.reset(seed=i)
        t0 = time.monotonic()
        rec: dict[str, Any] = {"case": i, "kind": kind}
        try:
            obs, reward, terminated, truncated, info = env.step(action)
        except DeciplaneError as exc:
            rec.update(outcome="error", error=type(exc).__name__,
                       mro=[c.__name__ for c in type(exc).__mro__], message=str(exc)[:200])
        except Exception as exc:  # noqa: BLE001 - an untyped error is a finding
            rec.update(outcome="untyped", error=type(exc).__name__, message=str(exc)[:200])
        else:
            rec.update(outcome="step", reward=float(reward),
                       finite=math.isfinite(float(reward)), obs_is_str=isinstance(obs, str),
                       rejected=info.get("action_rejected"),
                       invalid=bool(info.get("invalid_action", False)
                                    or info.get("verdict") == "invalid_program"))
        rec["secs"] = round(time.monotonic() - t0, 3)
        print(json.dumps(rec), flush=True)
    env.close()
    print("done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
