"""TRL's own GRPOTrainer on a deciplane env through ``environment_factory``: the tiny model
learns the tool-call format from expert conversations, then one GRPO step plays real
TextWorld-Express games through the env's ``choose`` tool and is scored by ``get_reward``.
Also: the factory's tools and episodes by hand, and TRL's template checks."""

from __future__ import annotations

import importlib.util
import os
import shutil

import pytest

import deciplane  # noqa: F401

pytest.importorskip("trl", reason="needs the interop extra (trl)")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from deciplane.interop.trl import (environment_factory, expert_conversations,  # noqa: E402
                                   prepare_tokenizer, seed_dataset)

needs_twx = pytest.mark.skipif(
    shutil.which("java") is None or importlib.util.find_spec("textworld_express") is None,
    reason="TextWorld-Express needs java and textworld-express")

TWC = dict(game="twc", split="train", game_params={"numLocations": 1, "numItemsToPutAway": 1},
           task_in_observation=True)


def _tiny_tokenizer():
    from transformers import AutoTokenizer

    from deciplane.agents.loading import ensure_tiny
    return prepare_tokenizer(AutoTokenizer.from_pretrained(ensure_tiny()))


@needs_twx
def test_menu_env_has_one_choose_tool_and_keeps_each_episodes_record():
    import inspect

    factory = environment_factory("deciplane/TextWorldExpress-v0", expert=True, **TWC)
    tools = [n for n, _ in inspect.getmembers(factory, inspect.isfunction)
             if not n.startswith("_") and n not in ("reset", "get_reward")]
    assert tools == ["choose"]
    env = factory()
    first = env.reset(seed=3, prompt=[{"role": "user", "content": ""}])
    assert "Legal actions:\nA) " in first and first.rstrip().endswith("by its label.")
    take = env._info["expert_command"]
    letter = chr(ord("A") + list(env.menu).index(take))
    reply = env.choose(letter)                        # by its letter ...
    assert "Legal actions:" in reply and env.calls == 1 and env.invalid == 0
    reply = env.choose(env._info["expert_command"])   # ... and by its line: the game is won
    assert env.done and "The episode is over" in reply
    assert env.choose("A") == "The episode is over: do not call a tool again."
    assert env.get_reward() == pytest.approx(1.0) and env.episodes[-1] == {
        "seed": 3, "calls": 3, "invalid": 0, "return": pytest.approx(1.0), "done": True}
    env.reset(seed=3)
    env.choose("fly to the moon")                     # not on the menu: the env's invalid step
    assert env.invalid == 1 and env.get_reward() <= 0.0
    env._close()


def test_text_env_has_one_act_tool_scored_by_its_verifier_and_no_gold_in_replies():
    from deciplane.benchmarks.data import load_labeled

    items, _ = load_labeled("arith", "train", limit=1)
    factory = environment_factory("deciplane/Math-v0", split="train")
    env = factory()
    assert hasattr(env, "act") and not hasattr(env, "choose")
    assert env.reset(seed=0, options={"index": 0}).strip() == items[0].prompt
    wrong = "-123456789"
    reply = env.act(wrong)
    assert env.done and env.get_reward() == 0.0
    assert str(items[0].gold) not in reply.replace(wrong, "")
    env.reset(seed=0, options={"index": 0})
    env.act(str(items[0].gold))
    assert env.get_reward() == 1.0
    env._close()


def test_tool_templates_pass_trls_checks_and_parse_their_own_calls():
    from transformers import AutoTokenizer
    from trl.chat_template_utils import (has_generation_markers,
                                         is_chat_template_prefix_preserving, parse_response,
                                         supports_tool_calling)

    from deciplane.agents.loading import ensure_tiny

    chatml = AutoTokenizer.from_pretrained(ensure_tiny())
    chatml.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
                            "{{ m['content'] }}<|im_end|>\n{% endfor %}")   # SmolLM2's form
    call = {"type": "function", "function": {"name": "choose",
                                             "arguments": {"action": "take red apple"}}}
    for tok in (_tiny_tokenizer(), prepare_tokenizer(chatml)):
        assert supports_tool_calling(tok) and is_chat_template_prefix_preserving(tok)
        assert has_generation_markers(tok.chat_template)
        msgs = [{"role": "user", "content": "hi"}]
        prompt = tok.apply_chat_template(msgs, add_generation_prompt=True, return_dict=True)
        full = tok.apply_chat_template(msgs + [{"role": "assistant", "content": "",
                                                "tool_calls": [call]}], return_dict=True)
        ids = full["input_ids"][len(prompt["input_ids"]):]
        parsed = parse_response(tok, ids, prefix=prompt["input_ids"])
        assert parsed["tool_calls"] == [call]


def _teach_the_call_format(model, tok, conversations, schema, steps: int):
    """Plain next-token training on the assistant turns (the tokenizer's generation marks)."""
    import torch

    encoded = [tok.apply_chat_template(c, tools=[schema], return_dict=True,
                                       return_assistant_tokens_mask=True) for c in conversations]
    opt = torch.optim.AdamW(model.parameters(), lr=5e-3)
    for step in range(steps):
        e = encoded[step % len(encoded)]
        ids = torch.tensor([e["input_ids"]])
        labels = ids.masked_fill(~torch.tensor([e["assistant_masks"]], dtype=torch.bool), -100)
        model(input_ids=ids, labels=labels).loss.backward()
        opt.step()
        opt.zero_grad()


@needs_twx
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_grpo_trainer_plays_the_env_through_its_tool_and_is_scored_by_get_reward(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import get_json_schema
    from trl import GRPOConfig, GRPOTrainer

    from deciplane.agents.loading import ensure_tiny

    torch.manual_seed(0)
    torch.set_num_threads(1)
    tok = _tiny_tokenizer()
    teacher = environment_factory("deciplane/TextWorldExpress-v0", expert=True, **TWC)
    firsts = [c[:2] for c in expert_conversations(teacher, range(16), max_turns=1)]
    assert all(c[1]["tool_calls"][0]["function"]["name"] == "choose" for c in firsts)
    model = AutoModelForCausalLM.from_pretrained(ensure_tiny())
    _teach_the_call_format(model, tok, firsts, get_json_schema(teacher.choose), steps=350)

    factory = environment_factory("deciplane/TextWorldExpress-v0", max_turns=3, **TWC)
    trainer = GRPOTrainer(
        model=model, processing_class=tok, environment_factory=factory,
        train_dataset=seed_dataset(2, first_seed=100),
        args=GRPOConfig(output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=4,
                        num_generations=2, max_completion_length=512,
                        max_tool_calling_iterations=3, use_cpu=True, report_to=[],
                        logging_steps=1, save_strategy="no", temperature=1.0, seed=0))
    trainer.train()
    assert trainer.state.global_step == 1
    envs = trainer._environment_pool[None]
    episodes = [ep for env in envs for ep in env.episodes]
    assert len(episodes) == 4                                # 2 games x 2 generations
    assert all(ep["calls"] >= 1 for ep in episodes), episodes
    assert sorted(ep["seed"] for ep in episodes) == [100, 100, 101, 101]
    log = trainer.state.log_history[0]
    assert log["tools/call_frequency"] >= 1.0
    assert log[f"rewards/{factory.__name__}/mean"] == pytest.approx(
        sum(ep["return"] for ep in episodes) / 4, abs=1e-5)
