"""A replanning expert for TextWorld Commonsense (twc): the next useful action from any state.

TextWorld-Express's gold path is a fixed action list from the start: once an agent leaves it
(puts a shirt on the wrong shelf, takes a put-away object back), the package has no expert.
This planner knows what the gold path implies — where each misplaced object goes and in
which room its container stands, and the moves between rooms — and tracks the game from
the commands actually taken, so it can always say what to do next:

1. put a held object into its container when standing by it (opening the container first);
   with ``places`` (every container the game accepts for each object: twc lists several,
   e.g. a blanket goes on the bed or in the wardrobe or the chest of drawers), into the
   nearest accepted one: a put the room allows now before an ``open``, both before a walk
   to the gold path's container;
2. take a misplaced object lying in the current room (also one the agent put in the wrong
   place, or took from its right place: an object not on the gold path was already put
   away, and its right place is where the agent took it from);
3. otherwise walk (breadth-first over the known moves, opening a closed door first: the
   game lists ``move d`` through a closed door too) to
   the room of a held object's container, else of a misplaced object.

It answers ``None`` when nothing is left to do or no known route leads on. Commands are the
game's own strings (``take X``, ``take X from Y``, ``put X in Y`` / ``put X on Y``,
``move north``, ``open door to north``, ``open Y``).
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Mapping, Sequence

OPPOSITE = {"north": "south", "south": "north", "east": "west", "west": "east"}

_ROOM = re.compile(r"You are in the ([^.]+)\.")
_CLOSED = re.compile(r"To the (\w+) you see a closed [^.]*door", re.IGNORECASE)


def room_of(look: str) -> str | None:
    """The room named by a ``look`` text ("You are in the kitchen. ..." -> "kitchen")."""
    m = _ROOM.search(look or "")
    return m.group(1).strip() if m else None


def closed_doors(look: str) -> set[str]:
    """Directions of the closed doors a ``look`` text mentions ("To the South you see a
    closed wood door." -> {"south"})."""
    return {m.group(1).lower() for m in _CLOSED.finditer(look or "")}


def parse_take(command: str) -> tuple[str, str | None] | None:
    """``take X`` -> (X, None); ``take X from Y`` -> (X, Y); anything else -> None."""
    m = re.fullmatch(r"take (.+?)(?: from (.+))?", command.strip())
    return (m.group(1), m.group(2)) if m else None


def parse_put(command: str, objects: Sequence[str] = ()) -> tuple[str, str] | None:
    """``put X in Y`` / ``put X on Y`` -> (X, Y). A known object name in ``objects`` wins
    over the first `` in ``/`` on `` (an object may be called "pot on a stand")."""
    command = command.strip()
    for x in sorted(objects, key=len, reverse=True):
        for prep in (" in ", " on "):
            head = f"put {x}{prep}"
            if command.startswith(head):
                return x, command[len(head):]
    m = re.fullmatch(r"put (.+?) (?:in|on) (.+)", command)
    return (m.group(1), m.group(2)) if m else None


class TwcPlanner:
    """Next action for twc from the gold path's facts and the commands taken since.

    ``gold``: the gold commands; ``rooms``: the room before each of them, plus the room
    after the last (``len(gold) + 1`` names, from replaying the gold path once);
    ``places``: object -> every container the game accepts for it (twc's object file; an
    object not in it has only its gold container)."""

    def __init__(self, gold: Sequence[str], rooms: Sequence[str | None],
                 places: Mapping[str, Sequence[str]] | None = None) -> None:
        if len(rooms) != len(gold) + 1:
            raise ValueError(f"rooms needs one name per gold command plus the final room: "
                             f"{len(gold)} commands, {len(rooms)} rooms")
        self.places = {obj: tuple(_key(c) for c in cs) for obj, cs in (places or {}).items()}
        self.target: dict[str, tuple[str, str | None]] = {}   # object -> (container, room)
        self.where: dict[str, tuple[str | None, str | None] | None] = {}  # None: held
        self.edges: dict[tuple[str, str], str] = {}           # (room, "move d") -> room
        for i, command in enumerate(gold):
            here, there = rooms[i], rooms[i + 1]
            put = parse_put(command, list(self.where))
            take = parse_take(command)
            if command.startswith("move ") and here and there:
                self._learn_move(here, command, there)
            elif take and take[0] not in self.where:
                self.where[take[0]] = (here, take[1])
            elif put:
                self.target[put[0]] = (put[1], here)

    # ---- tracking ----------------------------------------------------------------------------

    def _learn_move(self, here: str, command: str, there: str) -> None:
        if here == there:
            return
        self.edges[(here, command)] = there
        d = command.split()[-1]
        if d in OPPOSITE:
            self.edges.setdefault((there, f"move {OPPOSITE[d]}"), here)

    def observe(self, command: str, before: str | None, after: str | None,
                reward: float | None = None) -> None:
        """Record a command the game executed in room ``before`` (now in ``after``) and,
        when known, the ``reward`` it earned. A put into a container of ``places`` other
        than the gold path's that earns nothing is not accepted in this game (twc's object
        file lists two objects of one name with different places; the game's instance is
        one of them): that container leaves the object's places, so the object counts as
        misplaced again and goes on to its gold container."""
        if command.startswith("move ") and before and after:
            self._learn_move(before, command, after)
            return
        take = parse_take(command)
        if take:
            obj, source = take
            if obj not in self.target:     # not on the gold path: it was in its place
                self.target[obj] = (source, before) if source else (None, None)
            self.where[obj] = None
            return
        put = parse_put(command, list(self.where))
        if put:
            obj, container = put
            self.where[obj] = (before, container)
            gold = self.target.get(obj, (None, None))[0]
            if reward is not None and reward <= 0 and gold is not None \
                    and _key(container) != _key(gold) and self.accepts(obj, container):
                self.places[obj] = tuple(c for c in self.places[obj] if c != _key(container))

    # ---- planning ----------------------------------------------------------------------------

    def accepts(self, obj: str, container: str | None) -> bool:
        """Whether the game counts ``obj`` in ``container`` as put away (``places``)."""
        return container is not None and _key(container) in self.places.get(obj, ())

    def misplaced(self) -> list[str]:
        """Objects with a known right place that are not in it (held ones included)."""
        out = []
        for obj, (container, room) in self.target.items():
            if container is None:
                continue
            at = self.where.get(obj, (None, None))
            if at is None or (at != (room, container) and not self.accepts(obj, at[1])):
                out.append(obj)
        return out

    def _nearest_place(self, obj: str, legal: set[str]) -> str | None:
        """A put of ``obj`` into an accepted container the room allows now, else the ``open``
        of one (in ``places`` order: the same choice for the same object every time)."""
        puts: dict[str, str] = {}      # accepted-container key -> the legal command
        opens: dict[str, str] = {}
        for cmd in sorted(legal):
            put = parse_put(cmd, [obj])
            if put and put[0] == obj:
                puts.setdefault(_key(put[1]), cmd)
            elif cmd.startswith("open ") and not cmd.startswith("open door"):
                opens.setdefault(_key(cmd[5:]), cmd)
        for found in (puts, opens):
            for c in self.places.get(obj, ()):
                if c in found:
                    return found[c]
        return None

    def next_command(self, look: str, actions: Sequence[str]) -> str | None:
        """The next command in the room described by ``look`` (the game's ``look`` text),
        among the legal ``actions``; None when nothing is left to do or no route is known."""
        legal, room, closed = set(actions), room_of(look), closed_doors(look)
        todo = self.misplaced()
        held = [o for o in todo if self.where.get(o, ()) is None]
        for obj in held:
            near = self._nearest_place(obj, legal)
            if near is not None:
                return near
            container, home = self.target[obj]
            if room == home:
                for c in (f"put {obj} in {container}", f"put {obj} on {container}"):
                    if c in legal:
                        return c
                if f"open {container}" in legal:
                    return f"open {container}"
        for obj in todo:
            at = self.where.get(obj)
            if at is None or at[0] != room:
                continue
            source = at[1]
            for c in ([f"take {obj} from {source}"] if source else []) + [f"take {obj}"]:
                if c in legal:
                    return c
            if source and f"open {source}" in legal:
                return f"open {source}"
        goals = [self.target[o][1] for o in held] + [self.where[o][0] for o in todo
                                                      if self.where.get(o) is not None]
        for goal in goals:
            step = self._first_move(room, goal)
            if step is None:
                continue
            door = f"open door to {step.split()[-1]}"
            if step.split()[-1] in closed and door in legal:
                return door     # the game lists a move through a closed door (and opening
            if step in legal:   # an open one) too: the room's text says which is which
                return step
        return None

    def _first_move(self, start: str | None, goal: str | None) -> str | None:
        """The first move of a shortest known route (None: already there or no route)."""
        if start is None or goal is None or start == goal:
            return None
        seen, queue = {start}, deque([(start, None)])
        while queue:
            room, first = queue.popleft()
            for (here, move), there in self.edges.items():
                if here != room or there in seen:
                    continue
                step = first or move
                if there == goal:
                    return step
                seen.add(there)
                queue.append((there, step))
        return None


def _key(container: str) -> str:
    """A container's name compared without case and spaces (the object file writes
    "nightstand" where a room says "night stand")."""
    return container.replace(" ", "").lower()


__all__ = ["TwcPlanner", "parse_put", "parse_take", "closed_doors", "room_of"]
