"""Agents on Hugging Face models: model loading, the decision-plane menu agent, the free-text agent.

```python
from deciplane.agents import load_policy, MenuAgent, TextAgent
policy = load_policy("deciplane/tiny")            # or "deciplane/smollm2-135m-instruct", a folder, a .gguf
decisions = MenuAgent(policy).act(observations, menus)   # list[deciplane.Decision]
texts = TextAgent(policy, style="react").act(observations, menus)   # list[TextDecision]
```

Names are imported lazily (torch and transformers load on first use), so that
``import deciplane.evaluation.agents`` stays cheap for the command line.
"""

from __future__ import annotations

from deciplane._moved import renamed_names
from deciplane.utils import lazy_exports

_LAZY = {
    "load_policy": "deciplane.agents.loading",
    "BUILTIN_MODELS": "deciplane.agents.loading",
    "Policy": "deciplane.agents.policy",
    "Generation": "deciplane.agents.policy",
    "MenuAgent": "deciplane.agents.menu",
    "menu_entropy": "deciplane.agents.menu",
    "TextAgent": "deciplane.agents.text",
    "TextDecision": "deciplane.agents.text",
    "extract_command": "deciplane.agents.text",
    "match_command": "deciplane.agents.text",
    "normalise": "deciplane.agents.text",
    "LabelAlphabet": "deciplane.agents.labels",
    "compile_alphabet": "deciplane.agents.labels",
}


# the lazy names and the old ones (deciplane._moved.RENAMED)
__getattr__ = renamed_names(__name__, lazy_exports(__name__, _LAZY))


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_LAZY))


__all__ = list(_LAZY)
