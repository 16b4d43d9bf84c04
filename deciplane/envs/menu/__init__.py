"""What the menu games (TextWorld, TextWorld-Express, ALFWorld) share.

* :mod:`.menu`: the menu shown for a state's legal actions (order, seeded shuffle, pages,
  the expert's index; :class:`~deciplane.envs.menu.menu.MenuView`);
* :mod:`.text`: the text of observations and commands (character sets, cleaning,
  normalising, the ``state`` observation view);
* :mod:`.base`: :class:`~deciplane.envs.menu.base.MenuTextEnv`, the base env (argument
  checks, which game a reset plays, reading an action into a
  :class:`~deciplane.envs.menu.base.ParsedCommand`, the end of a step).

The :class:`~deciplane.types.Menu` type itself lives in :mod:`deciplane.types` (agents
use it too). Importing this package imports none of its modules.
"""
