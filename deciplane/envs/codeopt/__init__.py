"""CodeOpt: the task suite, timers and reward math behind ``deciplane/CodeOpt-v0``.

```python
from deciplane.envs import Sandbox
from deciplane.envs.codeopt import get_task, make_timer, evaluate
task = get_task("fib")
sb = Sandbox()
ev = evaluate(task, open("fast_fib.py").read(), sb, make_timer("instructions", sb))
ev.verdict, ev.speedup, ev.reward
```
"""

from deciplane.envs.codeopt.evaluate import (REWARD_MODES, VERDICTS, Evaluation,
                                             check_correctness, evaluate, evaluate_suite,
                                             outputs_match)
from deciplane.envs.codeopt.reward import (apply_noise_band, log_speedup_reward, median,
                                           net_cost, noise_band, percentile_reward, speedup,
                                           summarize_speedups)
from deciplane.envs.codeopt.tasks import (CodeOptTask, IOCase, extract_pyperformance_source,
                                          get_task, list_tasks)
from deciplane.envs.codeopt.timers import (TIMERS, CpuTimer, InstructionTimer, Measurement,
                                           Timer, make_timer, parse_callgrind_log)

__all__ = [
    "CodeOptTask", "IOCase", "get_task", "list_tasks", "extract_pyperformance_source",
    "Timer", "CpuTimer", "InstructionTimer", "Measurement", "TIMERS", "make_timer",
    "parse_callgrind_log", "Evaluation", "evaluate", "evaluate_suite", "check_correctness", "outputs_match",
    "REWARD_MODES", "VERDICTS", "median", "speedup", "net_cost", "noise_band",
    "apply_noise_band", "log_speedup_reward", "percentile_reward", "summarize_speedups",
]
