"""Agents on Hugging Face models: model loading, the decision-plane menu agent, the free-text agent.

```python
from deciplane.agents import load_policy, MenuAgent, TextAgent
policy = load_policy("deciplane/tiny")            # or "deciplane/smollm2-135m-instruct", a folder, a .gguf
decisions = MenuAgent(policy).act(observations, menus)   # list[deciplane.Decision]
texts = TextAgent(policy, style="react").act(observations, menus)   # list[TextDecision]
```
"""

from deciplane.agents.labels import LabelAlphabet, compile_alphabet
from deciplane.agents.loading import BUILTIN_MODELS, load_policy
from deciplane.agents.menu import MenuAgent, menu_entropy
from deciplane.agents.policy import Generation, Policy
from deciplane.agents.text import TextAgent, TextDecision, extract_command, match_command, normalise

__all__ = ["load_policy", "Policy", "Generation", "BUILTIN_MODELS", "MenuAgent", "TextAgent", "TextDecision",
           "LabelAlphabet", "compile_alphabet", "menu_entropy", "extract_command", "match_command", "normalise"]
