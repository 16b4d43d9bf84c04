"""Answer extraction by allowed rules only, normalisation, and equivalence clustering.

The rules are those of TTRL (docs/methods.md §5.1), in priority order:

1. the last ``\\boxed{...}`` (or ``\\fbox{...}``), braces matched (nested braces allowed);
2. the last "the answer is ..." / "answer: ..." phrase (to the end of its sentence/line);
3. the last number in the text (integers, decimals, ``a/b``, ``1,000``).

Nothing else (no model judge, no gold). :func:`extract_answer` returns ``None`` when no
rule yields a non-empty answer; voters drop ``None`` before counting.

:func:`answers_equivalent` compares *predictions among themselves* (for majority votes)
with math-verify in both directions; :func:`cluster_answers` / :func:`majority_vote`
group a list of predictions into equivalence classes with deterministic tie-breaking.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

from deciplane.envs.math.verify import DEFAULT_TIMEOUT_S, check_text, verify_many

_BOX_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")
_ANSWER_IS_RE = re.compile(
    # "final answer" only followed by "is" or ":" (not "The final answer to this problem is 13")
    r"(?:the\s+(?:final\s+)?answer\s+is|final\s+answer\s*(?:is\b|:)|answer\s*:)\s*:?\s*"
    r"(.+?)(?=(?:\.\s|\.$|\n|$))",
    re.IGNORECASE | re.DOTALL,
)
_NUMBER_RE = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+)?")
_PLAIN_NUMBER_RE = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` / ``\\fbox{...}`` with balanced braces, or
    ``None`` (also when the last box is never closed)."""
    starts = [m.end() for m in _BOX_RE.finditer(text)]
    for start in reversed(starts):
        depth, i = 1, start
        while i < len(text):
            ch = text[i]
            if ch == "\\" and i + 1 < len(text):  # skip escaped characters such as \{
                i += 2
                continue
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    return text[start:i]
            i += 1
    return None


_PHRASE_END_RE = re.compile(r",\s+(?=[A-Za-z]{2,})|;\s|\s+(?:because|since|as|which|so|and)\b")


def answer_phrase(text: str) -> str | None:
    """The text after the last "the answer is" / "answer:" phrase, up to the end of
    its sentence or line, or before a following clause (", since ...", " because ..."),
    or ``None``."""
    matches = list(_ANSWER_IS_RE.finditer(text))
    if not matches:
        return None
    return _PHRASE_END_RE.split(matches[-1].group(1), maxsplit=1)[0]


def last_number(text: str) -> str | None:
    """The last number in ``text`` (``-3``, ``2.5``, ``1,000``, ``3/4``), or ``None``."""
    matches = _NUMBER_RE.findall(text)
    return matches[-1] if matches else None


def normalize_answer(answer: str | None) -> str | None:
    """A canonical spelling for voting and display; ``None`` if nothing is left.

    Strips whitespace, ``$`` delimiters, a trailing period, ``\\left``/``\\right``,
    ``\\!``/``\\,`` spacing, a leading ``x =``; ``\\dfrac``/``\\tfrac`` -> ``\\frac``;
    a plain number loses thousands separators, a ``+`` sign and trailing decimal zeros
    (``"1,000.50"`` -> ``"1000.5"``, ``"-0"`` -> ``"0"``).
    """
    if answer is None:
        return None
    s = _strip_wrappers(answer)
    s = re.sub(r"\\(?:left|right)(?![A-Za-z])", "", s)
    s = re.sub(r"\\[!,;: ]", "", s)
    s = re.sub(r"\\[dt]frac", r"\\frac", s)
    s = re.sub(r"^\\text\{(.*)\}$", r"\1", s)
    s = re.sub(r"^[A-Za-z]\s*=\s*(?=\S)", "", s)
    s = _strip_wrappers(s)
    s = re.sub(r"\s+", " ", s)
    plain = s[1:] if s.startswith("+") else s
    if _PLAIN_NUMBER_RE.fullmatch(plain):
        s = _canonical_number(plain.replace(",", ""))
    return s or None


def _strip_wrappers(s: str) -> str:
    """Strip whitespace, ``$`` delimiters, markdown ``**`` and trailing periods until
    nothing changes."""
    prev = None
    while s != prev:
        prev, s = s, s.strip().rstrip(".").strip("$").strip("*")
    return s


def _canonical_number(s: str) -> str:
    """``"-007.500"`` -> ``"-7.5"``, ``"-0.0"`` -> ``"0"`` (a plain decimal, no commas)."""
    neg = s.startswith("-")
    whole, _, frac = s.lstrip("-").partition(".")
    whole, frac = whole.lstrip("0") or "0", frac.rstrip("0")
    body = f"{whole}.{frac}" if frac else whole
    return "-" + body if neg and body != "0" else body


def extract_answer(text: str | None) -> str | None:
    """The answer in a model response by the allowed rules (boxed > "the answer is" >
    last number), normalised; ``None`` when no rule finds a non-empty answer.

    Non-``str`` input or text that is not UTF-8 raises
    :class:`~deciplane.errors.InvalidAnswer`; ``None`` gives ``None``.
    """
    if text is None:
        return None
    check_text(text, "response")
    for rule in (last_boxed, answer_phrase):
        found = normalize_answer(rule(text))
        if found:
            return found
    return normalize_answer(last_number(text))


def is_bare_answer(text: str) -> bool:
    """True for a bare answer (``"12"``, ``"\\frac{1}{2}"``, ``"$[2,5)$"``, ``"x \\in [2,5)"``)
    rather than a response: no ``\\boxed``, no ``$`` inside, no word of 3+ letters outside
    LaTeX commands and ``\\text{}``, at most 200 characters."""
    from deciplane.envs.math.verify import _looks_like_prose

    s = _strip_wrappers(text)
    return (0 < len(s) <= 200 and "\\boxed" not in s and "\\fbox" not in s and "$" not in s
            and not _looks_like_prose(s))


def answer_for_grading(text: str | None) -> str | None:
    """What a reward compares with gold: a bare answer as given (normalised), otherwise
    the answer extracted from the response by the allowed rules (:func:`extract_answer`).
    Keeps ``"\\frac{1}{2}"`` whole where the last-number rule would read ``"2"``."""
    if text is None:
        return None
    check_text(text, "answer")
    if is_bare_answer(text):
        return normalize_answer(text)
    return extract_answer(text)


# -------------------------------------------------------------- equivalence/voting --

def answers_equivalent(a: str | None, b: str | None,
                       timeout_s: float = DEFAULT_TIMEOUT_S) -> bool:
    """True if two *predictions* are the same answer: equal after normalisation, or
    equivalent per math-verify in both directions (``"1/2"`` ~ ``"0.5"``). ``None`` or
    empty answers are equivalent to nothing."""
    na, nb = normalize_answer(a), normalize_answer(b)
    if na is None or nb is None:
        return False
    if na == nb:
        return True
    return all(verify_many([(na, nb), (nb, na)], timeout_s=timeout_s))


@dataclass
class Vote:
    """Result of a majority vote over one prompt's predictions.

    ``clusters`` hold indices into the input list, largest first; ties between equally
    large clusters go to the one whose first member came first (``tie`` is then True and
    ``tied`` lists the runners-up's representatives, for logging)."""

    answer: str | None                 # representative of the winning cluster
    count: int                         # its size
    n_valid: int                       # predictions left after dropping None/empty
    n_total: int = 0                   # predictions given, None/empty included
    clusters: list[list[int]] = field(default_factory=list)
    representatives: list[str] = field(default_factory=list)
    tie: bool = False
    tied: list[str] = field(default_factory=list)

    @property
    def agree(self) -> list[bool]:
        """Per input prediction: is it in the winning cluster?"""
        win = set(self.clusters[0]) if self.clusters else set()
        return [i in win for i in range(self.n_total)]


def cluster_answers(answers: Sequence[str | None], timeout_s: float = DEFAULT_TIMEOUT_S
                    ) -> tuple[list[list[int]], list[str]]:
    """Group predictions into equivalence classes; ``None``/empty ones are left out.

    Identical normalised spellings are merged first; each new spelling (in order of
    first appearance) then joins the first earlier class whose representative is
    equivalent both ways (:func:`answers_equivalent`), else starts a new class. Returns
    ``(clusters, representatives)``, clusters as index lists sorted by size (desc), then
    by first index — fully deterministic."""
    by_key: dict[str, list[int]] = {}
    for i, a in enumerate(answers):
        key = normalize_answer(a)
        if key is not None:
            by_key.setdefault(key, []).append(i)
    reps: list[str] = []
    members: list[list[int]] = []
    for key, idx in by_key.items():
        home = None
        if reps:
            checks = verify_many([(key, r) for r in reps] + [(r, key) for r in reps],
                                 timeout_s=timeout_s)
            for j in range(len(reps)):
                if checks[j] and checks[len(reps) + j]:
                    home = j
                    break
        if home is None:
            reps.append(key)
            members.append(list(idx))
        else:
            members[home].extend(idx)
    order = sorted(range(len(reps)), key=lambda j: (-len(members[j]), min(members[j])))
    return [sorted(members[j]) for j in order], [reps[j] for j in order]


def majority_vote(answers: Sequence[str | None],
                  timeout_s: float = DEFAULT_TIMEOUT_S) -> Vote:
    """Majority answer = the largest equivalence cluster among the predictions (never
    compared with gold). ``answer`` is ``None`` when no prediction is valid."""
    clusters, reps = cluster_answers(answers, timeout_s=timeout_s)
    n_valid = sum(len(c) for c in clusters)
    if not clusters:
        return Vote(answer=None, count=0, n_valid=0, n_total=len(answers))
    tied = [reps[j] for j in range(1, len(reps)) if len(clusters[j]) == len(clusters[0])]
    return Vote(answer=reps[0], count=len(clusters[0]), n_valid=n_valid, n_total=len(answers),
                clusters=clusters,
                representatives=reps, tie=bool(tied), tied=tied)


__all__ = ["extract_answer", "answer_for_grading", "is_bare_answer", "normalize_answer", "last_boxed", "answer_phrase", "last_number",
           "answers_equivalent", "cluster_answers", "majority_vote", "Vote"]
