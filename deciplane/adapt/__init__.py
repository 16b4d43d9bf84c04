"""Test-time adaptation on unlabeled prompts (docs/methods.md §5).

```python
from deciplane.adapt import TTRL, TTRLConfig, TTPO, TTPOConfig
from deciplane.agents import load_policy
from deciplane.envs import load_benchmark

tasks, scorer = load_benchmark("arith-shift", split="test")   # tasks carry no gold
policy = load_policy("deciplane/smollm2-135m-instruct")
answers = TTRL(policy, TTRLConfig()).run(tasks)                # {task_id: answer}
print(scorer.score(answers).accuracy)                          # the caller scores, afterwards
```

Every adapter follows :class:`Adapter` (``run(tasks) -> {task_id: answer}``); its
constructor takes a policy and a config, never a scorer. ``TASCO`` trains only a PEFT
prefix on a frozen model (docs/tasco.md). ``deciplane adapt ttrl|ttpo|tasco|probe-erpo``
(:func:`run_adaptation`) runs an adapter with its baselines — greedy and sampled
no-adaptation, majority vote at the same sample budget — and writes ``summary.json``.
"""

from deciplane.adapt.base import Adapter, AdaptConfig, AdaptRecords, BaseAdapter
from deciplane.adapt.probe_erpo import ProbeERPO, ProbeERPOConfig
from deciplane.adapt.tasco import TASCO, TASCOConfig
from deciplane.adapt.ttpo import TTPO, TTPOConfig
from deciplane.adapt.ttrl import TTRL, TTRLConfig


def run_adaptation(*args, **kwargs):
    """See :func:`deciplane.adapt.runner.run_adaptation`."""
    from deciplane.adapt.runner import run_adaptation as _run

    return _run(*args, **kwargs)


__all__ = ["Adapter", "AdaptConfig", "AdaptRecords", "BaseAdapter", "TTRL", "TTRLConfig",
           "TTPO", "TTPOConfig", "TASCO", "TASCOConfig", "ProbeERPO", "ProbeERPOConfig",
           "run_adaptation"]
