"""Peak host memory of sampling with a large vocabulary (issue 51, item 2).

A randomly initialised model of Qwen2.5-0.5B's shape (24 layers, hidden 896, 151,936-token
vocabulary, tied embeddings; no weights can be downloaded here) with SmolLM2's tokenizer
samples ``--samples`` responses of ``--tokens`` tokens for each of ``--prompts`` prompts
through :meth:`deciplane.agents.policy.Policy.generate`, in a fresh process (one per
measurement, so ``ru_maxrss`` is that process's own peak). Printed as JSON: resident memory
after loading and one forward, the peak during ``generate``, and the seconds it took.

The model folder is built once under ``--model-dir`` (fp32 weights, ~2 GB). To compare with
another version of deciplane, run the same command with ``PYTHONPATH`` set to that
checkout (the model folder is reused):

    python benchmarks/bench_generation_memory.py --model-dir /tmp/qwen05-shape
    git worktree add /tmp/before <commit>
    PYTHONPATH=/tmp/before python benchmarks/bench_generation_memory.py --model-dir /tmp/qwen05-shape
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

QWEN25_05B = dict(vocab_size=151936, hidden_size=896, intermediate_size=4864,
                  num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                  max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6,
                  tie_word_embeddings=True)
"""Qwen2.5-0.5B's shape (its config.json)."""


def build_model(folder: Path) -> None:
    """A random model of :data:`QWEN25_05B`'s shape with SmolLM2's tokenizer in ``folder``."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    from deciplane.agents.loading import load_policy

    torch.manual_seed(0)
    tok = load_policy("deciplane/smollm2-135m-instruct").tokenizer
    cfg = Qwen2Config(**QWEN25_05B, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)


def rss_gb() -> float:
    """This process's resident memory now (GB)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1e6
    return float("nan")


def measure(folder: Path, prompts: int, samples: int, tokens: int, threads: int) -> dict:
    """In this process: load, one forward, then ``generate`` (module doc)."""
    import torch

    import deciplane
    from deciplane.agents.loading import load_policy

    torch.set_num_threads(threads)
    policy = load_policy(folder)
    texts = [policy.format_prompt(f"Question {i}: what is {i} + {i + 1}? Think step by step.")
             for i in range(prompts)]
    with torch.no_grad():
        policy.model(input_ids=policy.tokenize(texts[0])[None])
    loaded = rss_gb()
    t0 = time.perf_counter()
    gens = policy.generate(texts, max_new_tokens=tokens, temperature=1.0,
                           num_return_sequences=samples, seed=0)
    took = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    return {"deciplane": str(Path(deciplane.__file__).parent), "prompts": prompts,
            "samples": samples, "tokens": tokens, "threads": threads,
            "new_tokens": sum(len(g.response_ids) for g in gens),
            "rss_after_load_gb": round(loaded, 3), "peak_rss_gb": round(peak, 3),
            "peak_above_loaded_gb": round(peak - loaded, 3), "generate_s": round(took, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", type=Path, required=True)
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inner:
        print(json.dumps(measure(args.model_dir, args.prompts, args.samples, args.tokens,
                                 args.threads)))
        return 0
    if not (args.model_dir / "config.json").is_file():
        build_model(args.model_dir)
    out = subprocess.run([sys.executable, __file__, "--inner", *sys.argv[1:]], check=True,
                         capture_output=True, text=True).stdout
    print(out.strip().splitlines()[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
