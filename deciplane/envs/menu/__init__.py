"""What the menu games (TextWorld, TextWorld-Express, ALFWorld) share.

* :mod:`.menu`: the menu shown for a state's legal actions (order, seeded shuffle, pages,
  the expert's index; :class:`~deciplane.envs.menu.menu.MenuView`);
* :mod:`.text`: the text of observations and commands (character sets, cleaning,
  normalising, the ``state`` observation view);
* :mod:`.base`: :class:`~deciplane.envs.menu.base.MenuTextEnv`, the base env (argument
  checks, which game a reset plays, reading an action into a
  :class:`~deciplane.envs.menu.base.ParsedCommand`, the end of a step).

The :class:`~deciplane.types.Menu` type itself lives in :mod:`deciplane.types` (agents
use it too); it is re-exported here.
"""

from deciplane.envs.menu.base import (ACTION_MODES, RENDER_MODES, REMOVED_ARGUMENTS,
                                      MenuTextEnv, ParsedCommand, check_menu_args,
                                      check_split)
from deciplane.envs.menu.menu import (MENU_ORDERS, MENU_OVERFLOWS, PAGE_ACTION,
                                      TEXT_TYPE_ERROR, MenuArranger, MenuView, as_menu_index,
                                      check_menu_order, check_menu_overflow, index_on_page,
                                      menu_page, menu_seed_for, page_count, shuffle_key,
                                      shuffled_order)
from deciplane.envs.menu.text import (COMMAND_CHARSET, MAX_COMMAND_CHARS, MAX_OBS_CHARS,
                                      MAX_RAW_COMMAND_CHARS, OBS_CHARSET, OBSERVATION_VIEWS,
                                      ambiguous_share, check_observation_view,
                                      clean_observation, normalize_command, state_view)
from deciplane.types import Menu

__all__ = ["Menu", "MenuView", "MenuArranger", "MENU_ORDERS", "MENU_OVERFLOWS", "PAGE_ACTION",
           "TEXT_TYPE_ERROR", "as_menu_index", "check_menu_order", "check_menu_overflow",
           "index_on_page", "menu_page", "menu_seed_for", "page_count", "shuffle_key",
           "shuffled_order",
           "OBS_CHARSET", "MAX_OBS_CHARS", "MAX_COMMAND_CHARS", "MAX_RAW_COMMAND_CHARS",
           "COMMAND_CHARSET", "OBSERVATION_VIEWS", "ambiguous_share", "check_observation_view",
           "clean_observation", "normalize_command", "state_view",
           "MenuTextEnv", "ParsedCommand", "REMOVED_ARGUMENTS", "ACTION_MODES", "RENDER_MODES",
           "check_menu_args", "check_split"]
