"""Agents on Hugging Face models: model loading, the decision-plane menu agent, the free-text agent.

```python
from deciplane.agents import load_policy, MenuAgent, TextAgent
policy = load_policy("deciplane/tiny")            # or "deciplane/smollm2-135m-instruct", a folder, a .gguf
decisions = MenuAgent(policy).act(observations, menus)
```
"""

from deciplane.agents.loading import BUILTIN_MODELS, load_policy
from deciplane.agents.policy import Generation, Policy

__all__ = ["load_policy", "Policy", "Generation", "BUILTIN_MODELS"]
