"""TextAgent: parsing free text into menu actions, and its decision records."""

from __future__ import annotations

import pytest
import torch

from deciplane.agents import TextAgent, extract_command, match_command, normalise
from deciplane.errors import ConfigError
from deciplane.types import Menu

MENU = Menu(("go north", "take red key", "open chest", "put apple on table"))


@pytest.mark.parametrize("text, command", [
    ("<think>the key opens it</think><action>take red key</action>", "take red key"),
    ("<think>x</think>\n<action> open chest </action>", "open chest"),
    ("<action>go north</action> no wait <action>open chest</action>", "open chest"),   # the last one
    ("<THINK>hmm</THINK><ACTION>Go North</ACTION>", "Go North"),
    ("<think>I will take the key", None),                                             # unfinished
    ("take red key", None),                                                           # no tags
    ("", None),
])
def test_extract_react(text, command):
    assert extract_command(text, "react") == command


@pytest.mark.parametrize("text, command", [
    ("go north", "go north"),
    ("  open chest\nbecause it is closed", "open chest"),
    ("\n\nAction: take red key", "take red key"),
    ("<action>go north</action>", "go north"),
    ("   \n  ", None),
])
def test_extract_action(text, command):
    assert extract_command(text, "action") == command


@pytest.mark.parametrize("command, index", [
    ("go north", 0),                          # exact
    ("  take red key ", 1),                   # surrounding whitespace
    ("Open Chest", 2),                        # case
    ("put  apple on\ttable.", 3),             # inner whitespace, punctuation
    ("OPEN CHEST!", 2),
    ("go south", None),                       # not on the menu
    ("take key", None),                       # partial: not a match
    ("asdf qwer", None), ("", None), ("...", None), (None, None),
])
def test_match_command(command, index):
    assert match_command(command, MENU) == index


def test_normalise():
    assert normalise(" Go,  NORTH! ") == "go north"


def test_text_agent_records_and_invalid_counting(tiny):
    obs = ["You are in a kitchen.", "You are in a hall."]
    for style in ("react", "action"):
        agent = TextAgent(tiny, style=style, max_new_tokens=6, temperature=1.0)
        out = agent.act(obs, [MENU, MENU], seed=0)
        assert len(out) == 2
        for d in out:
            assert d.response_ids.shape == d.response_logprobs.shape and 1 <= len(d.response_ids) <= 6
            assert not d.response_logprobs.requires_grad
            assert d.log_prob == pytest.approx(float(d.response_logprobs.sum()))
            assert d.command == extract_command(d.text, style)
            assert d.index == match_command(d.command, MENU) and d.invalid == (d.index is None)
            prompt = tiny.tokenizer.decode(d.prompt_ids)
            assert "- take red key" in prompt and ("<think>" in prompt) == (style == "react")
        assert [d.response_ids.tolist() for d in out] == [d.response_ids.tolist() for d in agent.act(obs, [MENU, MENU], seed=0)]
    with pytest.raises(ConfigError, match="style must be one of"):
        TextAgent(tiny, style="chat")


def test_smollm2_text_agent_generates_and_maps(smol):
    menu = Menu(("go north", "open fridge"))
    out = TextAgent(smol, style="action", max_new_tokens=6, greedy=True).act(
        ["You are in a kitchen. There is a fridge. Exits: north."], [menu])
    d = out[0]
    assert 1 <= len(d.response_ids) <= 6 and d.text == smol.tokenizer.decode(d.response_ids, skip_special_tokens=True)
    assert d.invalid == (match_command(extract_command(d.text, "action"), menu) is None)
    lp = smol.sequence_logprobs([d.prompt_ids], [d.response_ids])[0]
    torch.testing.assert_close(lp.detach(), d.response_logprobs, atol=2e-3, rtol=1e-3)
