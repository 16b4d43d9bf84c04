"""Test-time adaptation on unlabeled prompts (docs/methods.md §5): what every adapter
shares, and the run that scores it.

```python
from deciplane.agents import load_policy
from deciplane.envs import load_benchmark
from deciplane.methods.ttrl import TTRL, TTRLConfig

tasks, scorer = load_benchmark("arith-shift", split="test")   # tasks carry no gold
policy = load_policy("deciplane/smollm2-135m-instruct")
answers = TTRL(policy, TTRLConfig()).run(tasks)                # {task_id: answer}
print(scorer.score(answers).accuracy)                          # the caller scores, afterwards
```

Every adapter follows :class:`Adapter` (``run(tasks) -> {task_id: answer}``); its
constructor takes a policy and a config, never a scorer. The adapters are methods, one
module each in :mod:`deciplane.methods` (``ttrl``, ``ttpo``, ``tasco``, ``probe_erpo``);
this package holds what they share (:mod:`~deciplane.adapt.base`: :class:`BaseAdapter`,
:class:`AdaptConfig`, answer extraction and voting) and the run: ``deciplane adapt
ttrl|ttpo|tasco|probe-erpo`` (:func:`run_adaptation`) runs an adapter with its baselines —
greedy and sampled no-adaptation, majority vote at the same sample budget, or majority
vote and best-of-N at the same compute (:mod:`~deciplane.adapt.equal_compute`, TASCO) —
and writes ``summary.json``.
"""

from deciplane._moved import renamed_names
from deciplane.adapt.base import Adapter, AdaptConfig, AdaptRecords, BaseAdapter


def run_adaptation(*args, **kwargs):
    """See :func:`deciplane.adapt.runner.run_adaptation`."""
    from deciplane.adapt.runner import run_adaptation as _run

    return _run(*args, **kwargs)


# the adapters and their configs, in deciplane.methods since 0.3 (deciplane._moved.RENAMED)
__getattr__ = renamed_names(__name__)


__all__ = ["Adapter", "AdaptConfig", "AdaptRecords", "BaseAdapter", "run_adaptation"]
