"""``deciplane/tiny``: a small Llama and its own tokenizer, built locally from a seed.

It exists for fast tests and from-scratch training on the text games: a byte-level BPE
tokenizer trained on a fixed word list of TextWorld/ALFWorld vocabulary (so game words,
digits and the menu labels are single tokens) and a 2-layer Llama initialised from
``seed``. Nothing is downloaded; the result is a normal Hugging Face folder that
``AutoTokenizer`` / ``AutoModelForCausalLM`` load directly.
"""

from __future__ import annotations

import json
import shutil
import string
import tempfile
from importlib import resources
from pathlib import Path

from deciplane.agents.hf import quiet_transformers

TINY_VERSION = 1
"""Bumped whenever the recipe changes, so stale caches are rebuilt."""

SPECIAL_TOKENS = ["<pad>", "<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>"]
TAG_TOKENS = ["<think>", "</think>", "<action>", "</action>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}<|endoftext|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
TINY_CONFIG = dict(hidden_size=64, intermediate_size=192, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2,
                   max_position_embeddings=4096, rope_theta=10000.0,
                   tie_word_embeddings=True)


def vocabulary_words() -> list[str]:
    """The embedded word list (game vocabulary), comments stripped, sorted."""
    text = resources.files("deciplane.agents").joinpath("data/tiny_vocab.txt").read_text()
    return sorted({w.strip() for w in text.splitlines() if w.strip() and not w.startswith("#")})


def training_corpus() -> list[str]:
    """Deterministic BPE training corpus: each word bare, after a space, capitalised;
    labels and numbers repeated so that they become single tokens in both positions."""
    lines: list[str] = []
    for w in vocabulary_words():
        lines += [w, f" {w}", f" {w.capitalize()}", w.capitalize()] * 4
    labels = list(string.ascii_uppercase) + list(string.ascii_lowercase)
    numbers = [str(i) for i in range(100)]
    for tok in labels + numbers:
        lines += [f" {tok}", tok] * 50
    for p in [".", ",", ":", ";", "!", "?", ")", "(", "'", "-", "\n", " -", " (", ").", "):", "\n\n"]:
        lines += [p] * 20
    return lines


def build_tokenizer():
    """Train the byte-level BPE tokenizer and wrap it as a ``PreTrainedTokenizerFast``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=8192, min_frequency=2, show_progress=False,
                                  special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>",
                                   eos_token="<|endoftext|>", bos_token=None,
                                   unk_token=None, padding_side="left",
                                   additional_special_tokens=SPECIAL_TOKENS[2:])
    fast.add_tokens(TAG_TOKENS)  # non-special: kept when decoding
    fast.chat_template = CHAT_TEMPLATE
    fast.model_max_length = TINY_CONFIG["max_position_embeddings"]
    return fast


def build_model(vocab_size: int, pad_id: int, eos_id: int, seed: int):
    """A 2-layer Llama with deterministic initial weights."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=vocab_size, pad_token_id=pad_id, eos_token_id=eos_id,
                         bos_token_id=None, **TINY_CONFIG)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = pad_id
    model.generation_config.eos_token_id = eos_id
    return model


def build_tiny(out_dir: str | Path, seed: int = 0) -> Path:
    """Build tokenizer and model into ``out_dir`` (atomically: a temp folder renamed)."""
    out_dir = Path(out_dir)
    tokenizer = build_tokenizer()
    model = build_model(len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id, seed)
    tmp = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}."))
    try:
        with quiet_transformers():
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
        (tmp / "deciplane_builtin.json").write_text(json.dumps(
            {"name": "deciplane/tiny", "version": TINY_VERSION, "seed": seed}, indent=2))
        if out_dir.exists():
            shutil.rmtree(out_dir)
        tmp.rename(out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def is_current(folder: Path, seed: int) -> bool:
    """True if ``folder`` holds a complete tiny model of this recipe version and seed."""
    meta = folder / "deciplane_builtin.json"
    if not meta.is_file() or not (folder / "config.json").is_file():
        return False
    try:
        info = json.loads(meta.read_text())
    except ValueError:
        return False
    return info.get("version") == TINY_VERSION and info.get("seed") == seed
