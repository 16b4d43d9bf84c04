"""One optimizer step and one minibatch split for every trainer and adapter.

Only :mod:`deciplane.engine.optim` builds a torch optimizer and calls its ``step()``
(everything else goes through ``optimizer_step``); checked statically on every file of the
package, so a second hand-written zero/accumulate/step loop fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from deciplane.engine.optim import chunks, minibatches

PKG = Path(__file__).resolve().parents[2] / "deciplane"
OWNER = PKG / "engine" / "optim.py"


def _calls(path: Path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            yield node


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return node.id if isinstance(node, ast.Name) else "?"


def test_only_the_engine_builds_a_torch_optimizer_or_calls_step():
    builds, steps = [], []
    for f in sorted(PKG.rglob("*.py")):
        src = f.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.ImportFrom) and node.module == "torch.optim" and f != OWNER:
                builds.append(f"{f.relative_to(PKG.parent)}:{node.lineno} imports torch.optim")
        for call in _calls(f):
            name = _dotted(call.func)
            if name.startswith("torch.optim.") and name.split(".")[-1][:1].isupper() \
                    and f != OWNER:
                builds.append(f"{f.relative_to(PKG.parent)}:{call.lineno} builds {name}")
            if isinstance(call.func, ast.Attribute) and call.func.attr == "step" \
                    and not call.args and not call.keywords and f != OWNER:
                steps.append(f"{f.relative_to(PKG.parent)}:{call.lineno} calls {name}()")
    assert not builds, "build optimizers with deciplane.engine.optim.Optimizer:\n" + \
        "\n".join(builds)
    assert not steps, "step through deciplane.engine.optim.optimizer_step:\n" + "\n".join(steps)


def test_the_checker_sees_a_second_step():
    src = "def update(opt):\n    opt.zero_grad()\n    loss.backward()\n    opt.step()\n"
    calls = [c for c in ast.walk(ast.parse(src)) if isinstance(c, ast.Call)]
    assert any(isinstance(c.func, ast.Attribute) and c.func.attr == "step" and not c.args
               for c in calls)


@pytest.mark.parametrize("n,count", [(10, 3), (7, 7), (3, 5), (0, 2), (12, 4), (1, 1)])
def test_minibatches_follow_numpy_array_split(n, count):
    order = list(np.random.default_rng(n).permutation(n))
    want = [list(a) for a in np.array_split(np.array(order, dtype=int), count)]
    assert minibatches(order, count) == want


def test_minibatches_and_chunks_by_hand():
    assert minibatches([5, 1, 4, 2, 3], 2) == [[5, 1, 4], [2, 3]]
    assert minibatches([5, 1], 3) == [[5], [1], []]
    assert chunks([5, 1, 4, 2, 3], 2) == [[5, 1], [4, 2], [3]]
    assert chunks([], 4) == []
    with pytest.raises(Exception, match="minibatches = 0"):
        minibatches([1], 0)
