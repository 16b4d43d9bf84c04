"""Prompt text shared by the menu and free-text agents (pure string functions)."""

from __future__ import annotations

from typing import Sequence

MENU_SYSTEM_PROMPT = (
    "You are an agent playing a text-based game. Read the observation, then choose the single "
    "best next action from the numbered menu of legal actions. Reply with the action's letter only."
)
REACT_SYSTEM_PROMPT = (
    "You are an agent playing a text-based game. First reason step by step about the current "
    "situation inside <think> </think> tags. Then choose one admissible action and write it "
    "exactly as listed inside <action> </action> tags."
)
ACTION_SYSTEM_PROMPT = (
    "You are an agent playing a text-based game. Reply with exactly one admissible action, "
    "copied exactly as listed, and nothing else."
)
MENU_CUE = "Answer:"


def render_history(history: Sequence[tuple[str, str]] | None, k: int) -> str:
    """The last ``k`` turns as text; each turn is ``(observation, action)``: what the
    agent saw and what it did then. Empty when ``k == 0`` or there is no history."""
    if not history or k <= 0:
        return ""
    turns = list(history)[-k:]
    first = len(history) - len(turns) + 1
    lines = [f"Previous turns (last {len(turns)}):"]
    for i, (obs, act) in enumerate(turns, start=first):
        lines.append(f"[turn {i}] observation: {obs.strip()}")
        lines.append(f"[turn {i}] action: {act.strip()}")
    return "\n".join(lines) + "\n\n"


def menu_lines(labels_shown: Sequence[str], actions: Sequence[str]) -> list[str]:
    """The menu's lines, e.g. ``["A) go north", "B) take key"]``."""
    return [f"{lab}) {act}" for lab, act in zip(labels_shown, actions)]


def menu_user_text(observation: str, labels_shown: Sequence[str], actions: Sequence[str],
                   history: Sequence[tuple[str, str]] | None = None, k: int = 0) -> str:
    """Observation + lettered menu, e.g. ``A) go north``."""
    menu = "\n".join(menu_lines(labels_shown, actions))
    return (f"{render_history(history, k)}Current observation:\n{observation.strip()}\n\n"
            f"Legal actions:\n{menu}\n\nWhich action do you choose? Reply with its letter.")


def text_user_text(observation: str, actions: Sequence[str], style: str,
                   history: Sequence[tuple[str, str]] | None = None, k: int = 0) -> str:
    """Observation + admissible actions as a plain list (verl-agent style for ``react``)."""
    listing = "\n".join(f"- {a}" for a in actions)
    if style == "react":
        tail = ("Now it's your turn to take an action. First reason inside <think> </think>, then "
                "give one admissible action inside <action> </action>.")
    else:
        tail = "Reply with one admissible action, exactly as written above."
    return (f"{render_history(history, k)}Current observation:\n{observation.strip()}\n\n"
            f"Your admissible actions of the current situation are:\n{listing}\n\n{tail}")
