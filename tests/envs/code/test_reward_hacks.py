"""Rewards that cannot be gamed (issue 24): every program of the reward-hack corpus
(``reward_hacks.py``) gets reward 0 through ``deciplane/CodeGen-v0`` and through the
held-out scorer, with its failure kind named; honest programs are judged exactly as the
one-process harness judged them; the candidate never sees the hidden tests, a token or
the dataset; the statement's helpers that ``check`` calls are the dataset's own. Each
check runs cold (a sandbox and a checker process per run) and warm (a kept warm jail, a
checker forked from a warm helper: CodeGen-v0's default), and the two judge every hack
alike."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import gymnasium as gym
import pytest

import deciplane.envs  # noqa: F401  (registers the ids)
from deciplane.envs import Sandbox, load_benchmark
from deciplane.benchmarks.data import load_labeled
from deciplane.envs.code import easy_funcs
from deciplane.envs.code.harness import extract_program, run_hidden_tests, run_probes

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from reward_hacks import HACKS, POLY_HACK, response  # noqa: E402

# the failure kind each hack gets now (one-process harness: see reward_hacks.BEFORE)
KINDS = {
    "token_from_main": {"exited"}, "frame_getframe": {"wrong_answer"},
    "inspect_stack": {"wrong_answer"}, "frame_rebind_check": {"wrong_answer"},
    "os_exit_at_import": {"exited"}, "sys_exit_at_import": {"exited"},
    "os_exit_in_call": {"exited"}, "sys_exit_in_call": {"exited"},
    "atexit_token": {"exited"}, "always_equal": {"unencodable"},
    "int_subclass_eq": {"wrong_answer"}, "str_subclass_eq": {"wrong_answer", "runtime_error"},
    "list_subclass_eq": {"wrong_answer", "runtime_error"},
    "read_tests_from_cwd": {"wrong_answer", "runtime_error"},
    "read_proc": {"wrong_answer", "runtime_error"},
    "read_dataset_files": {"wrong_answer", "runtime_error"},
    "monkeypatch_builtins": {"exited", "runtime_error", "wrong_answer"},
    "print_success_line": {"exited"}, "fork_outlives_call": {"forked"},
    "signal_handlers": {"timeout"},
}
# HumanEval/0 (floats, a bool), HumanEval/2 (a float within tolerance); easy-funcs test/0
HE_IDS = ("HumanEval/0", "HumanEval/2")


@pytest.fixture(params=[False, True], ids=["cold", "warm"])
def warm(request):
    yield request.param
    from deciplane.sandbox import warm as warm_jails
    warm_jails.close_program_jails()


def test_corpus_is_complete():
    assert set(KINDS) == set(HACKS)


def test_every_hack_gets_reward_zero_through_codegen_env_with_its_kind(warm):
    out = {}
    for bench, split, ids in (("easy-funcs", "test", None), ("humaneval", "test", HE_IDS)):
        env = gym.make("deciplane/CodeGen-v0", benchmark=bench, split=split, limit=3,
                       timeout_s=2.0, warm=warm).unwrapped
        index = 0 if ids is None else [it.id for it in env._items].index(ids[0])
        for name in HACKS:
            _, info = env.reset(options={"index": index})
            _, reward, *_, info = env.step(response(name, info["entry_point"]))
            out[(bench, name)] = (reward, info["failure"], info["detail"])
    wrong = {k: v for k, v in out.items() if v[0] != 0.0 or v[1] not in KINDS[k[1]]}
    assert not wrong, wrong


def test_warm_and_cold_judge_every_hack_alike():
    items, _ = load_labeled("humaneval", "test", limit=3)
    ef = easy_funcs.generate_splits()["test"][0]
    tasks = [(items[0].prompt, items[0].gold, items[0].meta["entry_point"]),
             (ef.prompt, ef.tests, ef.entry_point)]
    sb = Sandbox()
    diff = []
    for prompt, tests, entry in tasks:
        for name in HACKS:
            prog = extract_program(response(name, entry), prompt, entry)
            got = [run_hidden_tests(sb, prog, tests, entry, prompt=prompt, timeout_s=2.0,
                                    warm=w) for w in (True, False)]
            if len({(o.passed, o.failure, o.detail) for o in got}) != 1:
                diff.append((entry, name, got))
    from deciplane.sandbox import warm as warm_jails
    warm_jails.close_program_jails()
    assert not diff, diff


def test_every_hack_gets_reward_zero_through_the_held_out_scorer():
    for bench, ids in (("easy-funcs", None), ("humaneval", HE_IDS)):
        tasks, scorer = load_benchmark(bench, "test", limit=3)
        task = tasks[0] if ids is None else next(t for t in tasks if t.id == ids[1])
        entry = task.meta["entry_point"]
        with scorer:
            rep = scorer.sample_accuracy({task.id: [response(n, entry) for n in HACKS]})
        assert rep.mean == 0.0, (bench, rep.per_task)


def test_failure_kinds_through_the_scorers_judge():
    from deciplane.envs.code.benchmarks import judge_outcomes

    items, _ = load_labeled("humaneval", "test", limit=3)
    names = [n for n in HACKS if n != "signal_handlers"]     # its timeout is checked above
    outs = judge_outcomes([(response(n, items[1].meta["entry_point"]), items[1])
                           for n in names], timeout_s=2.0)
    got = {n: o.failure for n, o in zip(names, outs)}
    assert not any(o.passed for o in outs)
    assert {n: k for n, k in got.items() if k not in KINDS[n]} == {}
    # the detail names what failed, never the hidden inputs
    lines = [ln.strip() for ln in items[1].gold.splitlines() if len(ln.strip()) > 8]
    assert all("candidate(" not in o.detail and not any(ln in o.detail for ln in lines)
               for o in outs)


def test_helpers_check_calls_are_the_datasets_own(warm):
    items, _ = load_labeled("humaneval", "test")
    by_id = {it.id: it for it in items}
    sb = Sandbox()
    poly = by_id["HumanEval/32"]
    prog = extract_program("```python\n" + POLY_HACK + "```", poly.prompt, poly.meta["entry_point"])
    o = run_hidden_tests(sb, prog, poly.gold, "find_zero", prompt=poly.prompt, warm=warm)
    assert not o.passed and o.failure == "wrong_answer"
    # identity "encoders": decode_cyclic(encode_cyclic(s)) == s would hold with them
    for tid, enc, dec in (("HumanEval/38", "encode_cyclic", "decode_cyclic"),
                          ("HumanEval/50", "encode_shift", "decode_shift")):
        it = by_id[tid]
        hack = (f"```python\ndef {enc}(s):\n    return s\ndef {dec}(s):\n    return s\n```")
        o = run_hidden_tests(sb, extract_program(hack, it.prompt, dec), it.gold, dec,
                             prompt=it.prompt, warm=warm)
        assert not o.passed and o.failure == "wrong_answer", (tid, o)


def test_the_candidate_sees_no_tests_token_or_dataset(warm):
    """What the candidate's process can see — its directory, its environment, every
    /proc entry, its __main__ — read from inside and returned as data."""
    look = '''
def look():
    import os, sys
    seen = []
    for name in os.listdir("."):
        seen.append(name + ":" + open(name, errors="replace").read())
    seen += [f"{k}={v}" for k, v in os.environ.items()]
    for pid in os.listdir("/proc"):
        for part in ("cmdline", "environ"):
            try:
                seen.append(open(f"/proc/{pid}/{part}", "rb").read().decode("utf-8", "replace"))
            except Exception:
                pass
    seen += [repr(v)[:2000] for v in vars(sys.modules["__main__"]).values()]
    return "\\n".join(seen)
'''
    items, _ = load_labeled("easy-funcs", "test", limit=2)
    secret = items[0].gold.splitlines()[1].strip()       # a real hidden assertion
    # the checker (outside) holds the secret in its own code and looks for it in what
    # the candidate saw; it passes only if the search ran and found nothing
    check = ("def check(candidate):\n"
             "    text = candidate()\n"
             "    assert 'candidate.py:' in text and 'main.py:' in text  # the search works\n"
             f"    for needle in ({secret!r}, 'def check', 'DECIPLANE-PASS', 'HumanEval',\n"
             "                   'easy_funcs', 'assert candidate'):\n"
             "        assert needle not in text, needle\n")
    o = run_hidden_tests(Sandbox(), look, check, "look", timeout_s=10.0, warm=warm)
    assert o.passed, o


def test_probe_outputs_are_encoded_by_the_trusted_side(warm):
    lies = '''
class _S(str):
    def __repr__(self):
        return "42"
class _O:
    def __repr__(self):
        return "'2'"
def f(x):
    return _S("real") if x == 1 else _O()
'''
    out = run_probes(Sandbox(), lies, "f", ["(1,)", "(2,)"], probe_timeout_s=2.0, warm=warm)
    assert out.outputs == ("'real'", "!unencodable:_O")


def test_honest_programs_are_judged_as_the_one_process_harness_judged_them(warm):
    rec = json.loads((HERE / "honest_outcomes.json").read_text())
    tasks = easy_funcs.generate_splits()["test"]
    sb = Sandbox()
    diff = []
    for row in rec["programs"]:
        t = tasks[row["task"]]
        o = run_hidden_tests(sb, extract_program(row["response"], t.prompt, t.entry_point),
                             t.tests, t.entry_point, prompt=t.prompt, warm=warm)
        if (o.passed, o.failure) != (row["passed"], row["failure"]):
            diff.append((row["task"], row["kind"], row["failure"], o.failure, o.detail))
        if o.failure == "wrong_answer":     # easy-funcs' assert messages name the input
            assert "input" not in o.detail and "candidate(" not in o.detail, o.detail
    assert len(rec["programs"]) == 120 and not diff, diff[:5]
