"""``deciplane/Math-v0``: single-turn math problems with a math-verify reward."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from gymnasium import spaces
from gymnasium.error import ResetNeeded

from deciplane.envs.math.answers import answer_for_grading
from deciplane.benchmarks.data import LabeledItem, load_labeled, lookup
from deciplane.envs.math.verify import DEFAULT_TIMEOUT_S, check_options, verify_math
from deciplane.envs.spaces import ObservationText, check_text_action
from deciplane.errors import ConfigError, InvalidAction, InvalidAnswer

MAX_ANSWER_CHARS = 8192  # graded: the last 8,192 characters of a response
MAX_RESPONSE_CHARS = 1_000_000  # longer is refused unread (an invalid answer)


class MathEnv(gym.Env[str, str]):
    """Answer a math problem in one step; reward 1 if the answer is right.

    Description
        One episode = one problem of a built-in benchmark (``arith``, ``arith-shift``,
        ``mmath-en``; see ``deciplane benchmarks``). This environment is for *training
        with rewards*: it holds the gold answers of its split in-process. For held-out
        evaluation use ``deciplane.envs.load_benchmark`` and its scorer, which keeps the
        gold in another process.

    Observation
        ``spaces.Text``: the problem text.

    Action
        ``spaces.Text``: the answer text — a bare answer (``"12"``, ``"\\frac12"``), used
        as given, or a whole response, from which the answer is extracted by the allowed
        rules only (last ``\\boxed{}``, "the answer is ...", last number;
        ``deciplane.envs.math.answers.answer_for_grading``).
        A non-``str`` action (or ``bytes`` that are not UTF-8) raises
        ``deciplane.errors.InvalidAnswer`` (an ``InvalidAction``). Text whose content
        cannot be graded — a control character other than tab/newline/carriage return,
        a lone surrogate, more than 1,000,000 characters — is an invalid answer: reward
        0.0, ``info["invalid_action"]`` True and ``info["action_rejected"]`` saying why;
        it never reaches the verifier. Of a longer valid response the last 8,192
        characters are graded.

    Reward
        1.0 if the extracted answer is equivalent to the gold per math-verify (run in a
        worker process with a timeout, see ``deciplane.envs.math.verify``), else 0.0. An empty
        answer, or one with no extractable answer, gets 0.0 and ``info["empty_answer"]``
        / ``info["no_answer"]`` set to True; a verification timeout gets 0.0.

    Episode end
        ``terminated=True`` after the single step; ``truncated`` is always False.
        ``step`` before ``reset`` or after the end raises ``gymnasium.error.ResetNeeded``.

    Arguments
        ``benchmark`` (str, default ``"arith"``), ``split`` (str, default ``"train"``),
        ``limit`` (int | None: the first ``limit`` problems of the split),
        ``verify_timeout_s`` (float, default 5.0).
        ``reset(seed=..., options={"index": i})`` picks problem ``i``; without it the
        problem is drawn with the environment's RNG. ``info`` carries ``task_id``,
        ``index``, ``meta``; after ``step`` also ``correct``, ``extracted``,
        ``empty_answer``, ``no_answer``, ``invalid_action`` (and ``action_rejected``).
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(self, benchmark: str = "arith", split: str = "train", limit: int | None = None,
                 verify_timeout_s: float = DEFAULT_TIMEOUT_S, render_mode: str | None = None):
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.benchmark, self.split = benchmark, split
        check_options(verify_timeout_s, {})  # ConfigError now, not at the first step
        self.verify_timeout_s = float(verify_timeout_s)
        self.render_mode = render_mode
        self._items: list[LabeledItem]
        _check_math_judged(benchmark)
        self._items, self.split_fingerprint = load_labeled(benchmark, split, limit)
        longest = max(len(it.prompt) for it in self._items)
        self.observation_space = ObservationText(max_length=max(longest, 1),
                                                charset=_charset(self._items))
        self.action_space = spaces.Text(max_length=64)
        self._current: LabeledItem | None = None
        self._index = -1
        self._last = ""

    def __len__(self) -> int:
        return len(self._items)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        if options and "index" in options:
            index = int(options["index"])
            if not 0 <= index < len(self._items):
                raise IndexError(f"options['index'] must be in [0, {len(self._items)}), "
                                 f"got {index}")
        else:
            index = int(self.np_random.integers(len(self._items)))
        self._index, self._current = index, self._items[index]
        self._last = self._current.prompt
        return self._current.prompt, self._info()

    def _info(self) -> dict[str, Any]:
        assert self._current is not None
        return {"task_id": self._current.id, "index": self._index,
                "meta": dict(self._current.meta)}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._current is None:
            raise ResetNeeded("call reset() before step(); Math-v0 episodes are one step")
        try:
            checked = check_text_action(action, MAX_RESPONSE_CHARS, what="answer (action)")
        except InvalidAction as exc:
            raise InvalidAnswer(str(exc)) from None
        info = self._info()
        if not checked.ok:
            text, extracted, correct = "", None, False
            info.update(action_rejected=checked.problem)
        else:
            text = checked.text
            if len(text) > MAX_ANSWER_CHARS:
                text = text[-MAX_ANSWER_CHARS:]  # the final answer is at the end
            extracted = answer_for_grading(text)
            correct = bool(extracted) and verify_math(extracted, self._current.gold,
                                                      timeout_s=self.verify_timeout_s)
        info.update(correct=correct, extracted=extracted,
                    empty_answer=checked.ok and not text.strip(),
                    no_answer=extracted is None, invalid_action=not checked.ok)
        obs = self._current.prompt
        self._last = f"{obs}\n> {text}\n{'correct' if correct else 'wrong'}"
        self._current = None
        return obs, float(correct), True, False, info

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self._last
        return None


CODE_JUDGE = "deciplane.envs.code.benchmarks:judge_code"


def _check_math_judged(benchmark: str) -> None:
    """Math-v0 rewards with math-verify, so a benchmark its scorer grades another way
    (code run against hidden tests) would train on a reward the scorer never gives."""
    judge = lookup(benchmark).judge
    if judge == CODE_JUDGE:
        raise ConfigError(f"benchmark {benchmark!r} is a code benchmark (hidden tests run "
                          "in the sandbox); use deciplane/CodeGen-v0 for it, not Math-v0")


def _charset(items: list[LabeledItem]) -> str:
    """Every character of the prompts plus alphanumerics, *sorted*: the observation
    space must contain the observations (``check_env`` verifies it), and AsyncVectorEnv's
    shared memory encodes characters by their index in this order, which must be the
    same in every process (a set's order depends on the per-process hash seed)."""
    from gymnasium.spaces.text import alphanumeric

    chars = set(alphanumeric)
    for it in items:
        chars.update(it.prompt)
    return "".join(sorted(chars))


__all__ = ["MathEnv", "InvalidAnswer"]
