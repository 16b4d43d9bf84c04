"""A training method from outside deciplane: REINFORCE on the menu agent's decisions.

The package's entry point (``deciplane.methods``) names :data:`SPEC`; importing it costs
no more than ``deciplane.methods``: the method's classes are in :mod:`toy_method.method`,
loaded when a run needs them.
"""

from deciplane.methods import MethodSpec

SPEC = MethodSpec(
    name="toy_reinforce", kind="train",
    target="toy_method.method:ToyReinforce", config="toy_method.method:ToyReinforceConfig",
    summary="REINFORCE with a group-mean baseline on the menu agent's decisions (an "
            "example plug-in)",
    paper="Williams, 1992: Simple statistical gradient-following algorithms for "
          "connectionist reinforcement learning",
    ours="the example's choices: one advantage per episode, no clipping, no KL",
    evaluates_on="env", greedy="toy_method.method:greedy_agent")
