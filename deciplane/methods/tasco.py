"""TASCO: test-time prefix adaptation of a frozen model by confidence and stability.

**Paper-inspired, parameters ours.** The base model's weights never change; only a
task-level PEFT prefix (``num_virtual_tokens`` = m virtual key/value tokens per layer) is
optimised on the unlabeled prompts with

    L = H(p(. | prefix, x)) + mu * mean_draws KL(p(. | prefix, x) || p(. | prefix + eps, x))

over the *answer positions*: the positions of an answer sampled under the current prefix
(resampled every optimisation step, no gradient through the sampling). ``eps`` perturbs
the prefix parameters: ``random`` (Gaussian ``N(0, sigma^2)``, averaged over ``n_draws``
draws) or ``sam`` (one worst-case step ``rho * g / ||g||`` with ``g`` the gradient of the
entropy term with respect to the prefix: the SAM direction of the confidence objective).
``mu = 0`` is the confidence-only ablation (no perturbed forward at all). The
prefix-conditioned model then answers (greedy, or a majority vote). The loss terms are
:mod:`deciplane.objectives.tasco`; every default value here is ours.
Reference (paper abstract): up to +17.2% accuracy and -28.1% output tokens.

Prefix and generation
    The prefix lives in a PEFT ``PrefixTuningConfig`` model (saved with
    ``save_pretrained``, loaded back with :meth:`TASCO.load_prefix`). PEFT 0.21 +
    transformers 5 ``PeftModel.generate()`` silently ignores the prefix, so generation
    builds the prefix cache itself (:func:`prefix_cache`, the layout of PEFT's
    ``get_prompt``) and hands it to the *base* model's ``generate``, with the attention
    mask extended by m ones on the left of the real (left-padded) mask and m placeholder
    ids in front of the prompt (transformers skips the input positions the cache already
    covers). Positions: the prefix holds positions ``0..m-1``, so a real token's position
    is ``m + (index among the real tokens)`` -- the same in training forwards, in
    generation and in PEFT's own forward (which adds m to the position ids it is given);
    generation equals a step-by-step decode through the PEFT forward (tested).

Compute
    Everything is counted in ``adapter.budget``;
    :func:`~deciplane.engine.budget.forward_token_equivalents` turns it into
    forward-token equivalents (generation prefill + generated tokens + teacher-forced
    forward tokens + 2 x backpropagated tokens). The runner's equal-budget baselines
    (majority vote and best-of-N by mean token log-prob,
    :mod:`deciplane.adapt.equal_compute`) get as many samples per task as that budget buys.
"""

from __future__ import annotations

import copy
import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Sequence

import torch
from torch import nn

from deciplane._moved import renamed_names
from deciplane.adapt.base import AdaptConfig, BaseAdapter, extract, vote
from deciplane.errors import ConfigError
from deciplane.options import learning_rate, option
from deciplane.objectives.tasco import (TASCOLossConfig, mean_entropy, random_perturbation,
                                        sam_perturbation, tasco_loss)
from deciplane.engine.budget import Budget
from deciplane.engine.generation import generate
from deciplane.engine.optim import MicroLoss, Normaliser, Optimizer, optimizer_step
from deciplane.types import UnlabeledTask

# ---------------------------------------------------------------------------------------
# Pure helpers
# ---------------------------------------------------------------------------------------


def weights_sha256(module: nn.Module, skip: str = "prompt_encoder") -> str:
    """SHA-256 over every parameter and buffer (name, dtype, shape, bytes) of ``module``
    except those whose name contains ``skip`` (the prefix)."""
    h = hashlib.sha256()
    for name, t in sorted(module.state_dict().items()):
        if skip and skip in name:
            continue
        t = t.detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def prefix_cache(weight: torch.Tensor, batch_size: int, *, num_layers: int, num_heads: int,
                 head_dim: int):
    """A ``DynamicCache`` holding the prefix ``weight`` ``(m, num_layers*2*num_heads*head_dim)``
    as every layer's key/value ``(B, num_heads, m, head_dim)`` -- the layout of PEFT's
    ``get_prompt`` (a function of ``weight``, so gradients and perturbations pass)."""
    from transformers import DynamicCache

    m = weight.shape[0]
    x = weight.unsqueeze(0).expand(batch_size, -1, -1).reshape(
        batch_size, m, num_layers * 2, num_heads, head_dim)
    layers = x.permute(2, 0, 3, 1, 4).split(2)          # num_layers x (2, B, H, m, d)
    return DynamicCache([(kv[0], kv[1]) for kv in layers])


def cache_to_prefix(keys: Sequence[torch.Tensor], values: Sequence[torch.Tensor]) -> torch.Tensor:
    """Inverse of :func:`prefix_cache` for batch 1: per-layer ``(1, H, m, d)`` keys and
    values -> the prefix weight ``(m, L*2*H*d)``."""
    stacked = torch.stack([t[0] for kv in zip(keys, values) for t in kv])   # (2L, H, m, d)
    m = stacked.shape[2]
    return stacked.permute(2, 0, 1, 3).reshape(m, -1)


def instability(clean_logits: torch.Tensor, perturbed: Sequence[torch.Tensor],
                mask: torch.Tensor) -> torch.Tensor:
    """Mean over draws of the masked-mean ``KL(p || p_eps)`` (the ``D`` term)."""
    from deciplane.objectives.tasco import consistency_kl

    return torch.stack([consistency_kl(clean_logits, p, mask) for p in perturbed]).mean()


# ---------------------------------------------------------------------------------------
# Config
# ---------------------------------------------------------------------------------------


@dataclass
class TASCOConfig(AdaptConfig):
    """TASCO options (paper-inspired; every default is ours). ``finetune``, ``lora_rank``
    and ``lora_alpha`` do not apply: only the prefix is trained."""

    num_virtual_tokens: int = option(8, ge=1)
    """m: virtual key/value tokens of the prefix (per layer)."""
    prefix_init: Literal["text", "random"] = "text"
    """`text`: the prefix starts as the base model's keys/values of `prefix_init_text` (so it first acts as that context); `random`: N(0, prefix_init_std^2)."""
    prefix_init_text: str = "Solve the problem and give the final answer as a number."
    """Text whose first m tokens initialise the prefix (prefix_init=text; repeated if shorter)."""
    prefix_init_std: float = option(0.02, ge=0)
    """Std of the random initialisation (prefix_init=random)."""
    loss: TASCOLossConfig = field(
        default_factory=lambda: TASCOLossConfig(sigma=0.05, rho=0.5))
    """The TASCO loss, used as it is: mu, the weight of the instability KL (0 = confidence only: entropy minimisation, no perturbed forwards); perturbation, `random` (Gaussian noise on the prefix with std sigma, averaged over n_draws) or `sam` (one worst-case step of radius rho, global L2 norm over the prefix, along the normalised entropy gradient). Defaults ours: mu 1.0, random, sigma 0.05, n_draws 2, rho 0.5. 0.2's mu, perturbation, sigma, n_draws, rho still load, with a warning."""
    samples: int = option(2, ge=1)
    """Answers sampled per prompt per step to define the answer positions."""
    lr: float = learning_rate(1e-2)
    """AdamW learning rate of the prefix."""
    finetune: Literal["lora", "full"] = "lora"
    """Ignored by TASCO (the base model is frozen; only the prefix trains)."""

    PAPER: ClassVar[dict[str, Any]] = {}
    CONFIG_ALIASES: ClassVar[dict[str, str]] = {
        name: f"loss.{name}" for name in ("mu", "perturbation", "sigma", "n_draws", "rho")}
    NOTE: ClassVar[str] = ("TASCO here is paper-inspired: the loss (entropy + mu * KL under prefix "
                           "perturbations) follows the paper's idea, every parameter value and the "
                           "SAM direction (entropy gradient) are ours")

    def validate(self) -> None:
        super().validate()   # ranges: declared on the fields

    def variant(self) -> str:
        """The run's label: ``confidence-only`` when mu = 0, else the perturbation."""
        loss = self.loss
        return "confidence-only (mu=0)" if loss.mu == 0 else f"{loss.perturbation} perturbation"


# ---------------------------------------------------------------------------------------
# Prefix model and prefix-aware generation
# ---------------------------------------------------------------------------------------


class PrefixGenerator(nn.Module):
    """A ``generate``-only stand-in for a policy's model: the frozen base model's own
    ``generate`` with the prefix cache passed in (``Policy.generate`` calls it exactly as
    it calls a model, so sampling, log-probs and stop handling are the policy's)."""

    def __init__(self, owner: "PrefixModel") -> None:
        super().__init__()
        self._owner = [owner]          # a list: not registered as a submodule

    @property
    def generation_config(self):
        return self._owner[0].base.generation_config

    def generation_forward_module(self) -> nn.Module:
        """The model whose forward :meth:`generate` runs (``Policy.generate`` reads the
        emitted tokens' log-probs from its forwards)."""
        return self._owner[0].base

    @torch.no_grad()
    def generate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                 num_return_sequences: int = 1, **kwargs):
        pm = self._owner[0]
        if num_return_sequences > 1:   # expand ourselves: the prefix cache is per row
            input_ids = input_ids.repeat_interleave(num_return_sequences, 0)
            attention_mask = attention_mask.repeat_interleave(num_return_sequences, 0)
        b, m = input_ids.shape[0], pm.m
        dev = input_ids.device
        placeholder = torch.full((b, m), int(kwargs.get("pad_token_id") or 0), dtype=input_ids.dtype,
                                 device=dev)
        ids = torch.cat([placeholder, input_ids], 1)
        mask = torch.cat([torch.ones((b, m), dtype=attention_mask.dtype, device=dev), attention_mask], 1)
        out = pm.base.generate(input_ids=ids, attention_mask=mask,
                               cache=pm.cache(b), **kwargs)
        out.sequences = out.sequences[:, m:]       # drop the placeholders
        return out


class PrefixModel:
    """The frozen base model plus a trainable PEFT prefix.

    ``peft`` is the PEFT ``PeftModel`` (prefix tuning) used for ``save_pretrained`` and as
    the reference forward in tests; :meth:`forward` runs the base model with
    :func:`prefix_cache` of ``weight + eps`` (a differentiable function of the prefix).
    """

    def __init__(self, base: nn.Module, num_virtual_tokens: int, *, peft_model=None) -> None:
        from peft import PrefixTuningConfig, get_peft_model

        self.base = base
        base.eval()                     # frozen: no dropout either
        for p in base.parameters():
            p.requires_grad_(False)
        if peft_model is None:
            cfg = PrefixTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=num_virtual_tokens,
                                     prefix_projection=False)
            peft_model = get_peft_model(base, cfg)
        self.peft = peft_model
        c = self.peft.peft_config[self.peft.active_adapter]
        if c.num_transformer_submodules != 1 or getattr(c, "prefix_projection", False):
            raise ConfigError("TASCO supports decoder-only models with a plain prefix "
                              "(prefix_projection=False)")
        self.m = c.num_virtual_tokens
        self.num_layers, self.num_heads = c.num_layers, c.num_attention_heads
        self.head_dim = c.token_dim // c.num_attention_heads

    @property
    def weight(self) -> nn.Parameter:
        """The prefix parameters ``(m, num_layers*2*heads*head_dim)`` (the only trainable ones)."""
        return self.peft.prompt_encoder[self.peft.active_adapter].embedding.weight

    def parameters(self) -> list[nn.Parameter]:
        return [self.weight]

    def cache(self, batch_size: int, eps: torch.Tensor | None = None):
        w = self.weight if eps is None else self.weight + eps
        dtype = next(self.base.parameters()).dtype
        return prefix_cache(w.to(dtype), batch_size, num_layers=self.num_layers,
                            num_heads=self.num_heads, head_dim=self.head_dim)

    def init_from_text(self, tokenizer, text: str) -> None:
        """Set the prefix to the base model's keys/values of the first m tokens of ``text``
        (repeated when shorter) at positions ``0..m-1``."""
        ids = tokenizer(text, add_special_tokens=False)["input_ids"] or [tokenizer.eos_token_id]
        ids = (ids * math.ceil(self.m / len(ids)))[:self.m]
        dev = self.weight.device
        with torch.no_grad():
            out = self.base(input_ids=torch.tensor([ids], device=dev), use_cache=True)
            cache = out.cache
            keys = [layer.keys for layer in cache.layers]
            values = [layer.values for layer in cache.layers]
            self.weight.copy_(cache_to_prefix(keys, values).to(self.weight.dtype))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                eps: torch.Tensor | None = None, logits_to_keep: int = 0):
        """Logits of the prefix(+eps)-conditioned model on a left-padded batch."""
        from deciplane.agents.policy import position_ids_from_mask

        b = input_ids.shape[0]
        dev = input_ids.device
        mask = torch.cat([torch.ones((b, self.m), dtype=attention_mask.dtype, device=dev),
                          attention_mask], 1)
        pos = position_ids_from_mask(attention_mask) + self.m
        return self.base(input_ids=input_ids, attention_mask=mask, position_ids=pos,
                         cache=self.cache(b, eps), use_cache=False,
                         logits_to_keep=logits_to_keep).logits

    def policy(self, policy):
        """A shallow copy of ``policy`` whose ``generate`` is prefix-conditioned."""
        p = copy.copy(policy)
        p.model = PrefixGenerator(self)
        p._reference = None
        return p

    def save(self, path: str | Path) -> Path:
        """``save_pretrained`` of the PEFT prefix (adapter_config.json + weights)."""
        path = Path(path)
        self.peft.save_pretrained(str(path))
        return path

    @classmethod
    def load(cls, base: nn.Module, path: str | Path) -> "PrefixModel":
        from peft import PeftModel

        pm = PeftModel.from_pretrained(base, str(path))
        return cls(base, pm.peft_config[pm.active_adapter].num_virtual_tokens, peft_model=pm)


# ---------------------------------------------------------------------------------------
# The adapter
# ---------------------------------------------------------------------------------------


class TASCO(BaseAdapter):
    """Prefix-only test-time adaptation of a frozen model (entropy + mu * instability).
    ``TASCO(policy, TASCOConfig()).run(tasks)``; ``adapter.prefix.save(path)`` keeps the
    prefix. The policy itself is left untouched (its weights are hash-checked)."""

    Config = TASCOConfig
    budget_unit: ClassVar[str] = "forward_token_equivalents"
    """The runner sizes TASCO's equal-budget baselines by compute, not by samples."""

    def __init__(self, policy, config: TASCOConfig | None = None, progress=None):
        super().__init__(policy, config, progress)
        self.opt = Optimizer(self.prefix.parameters(), lr=self.config.lr,
                             weight_decay=self.config.weight_decay,
                             max_grad_norm=self.config.max_grad_norm, budget=self.budget)
        self._gen = torch.Generator().manual_seed(self.config.seed)

    def _prepare_policy(self) -> None:
        cfg = self.config
        if self.policy.is_lora:
            raise ConfigError("TASCO adapts a frozen base model with a prefix; load the policy "
                              "without LoRA adapters")
        for p in self.policy.model.parameters():   # frozen, so trunk_dtype can cast it
            p.requires_grad_(False)
        self._cast_frozen()      # before hashing: the hash checks what adaptation sees
        self.base_sha256 = weights_sha256(self.policy.model, skip="")
        self.prefix = PrefixModel(self.policy.model, cfg.num_virtual_tokens)
        if cfg.prefix_init == "text":
            self.prefix.init_from_text(self.policy.tokenizer, cfg.prefix_init_text)
        else:
            with torch.no_grad():
                g = torch.Generator().manual_seed(cfg.seed)
                self.prefix.weight.copy_(torch.randn(self.prefix.weight.shape, generator=g)
                                         * cfg.prefix_init_std)
        self.prefix_policy = self.prefix.policy(self.policy)

    # -- protocol ---------------------------------------------------------------------------
    def samples_per_prompt(self) -> int:
        return self.config.samples

    def resume_optimizer(self):
        return self.opt

    def trainable_named_parameters(self) -> dict[str, Any]:
        return {"prefix": self.prefix.weight}

    def own_state(self) -> dict[str, Any]:
        return {"perturbation_rng": self._gen.get_state()}

    def load_own_state(self, state: dict[str, Any]) -> None:
        self._gen.set_state(state["perturbation_rng"])

    def answer(self, tasks: Sequence[UnlabeledTask], budget: Budget | None = None) -> dict[str, str]:
        """Answers of the prefix-conditioned model (greedy or majority, as configured)."""
        plain = self.policy
        self.policy = self.prefix_policy
        try:
            return super().answer(tasks, budget)
        finally:
            self.policy = plain

    def _probe(self, tasks: Sequence[UnlabeledTask]) -> dict[str, float | None]:
        """The guard's probe answers, prefix-conditioned (what TASCO adapts)."""
        plain = self.policy
        self.policy = self.prefix_policy
        try:
            return super()._probe(tasks)
        finally:
            self.policy = plain

    def base_weights_unchanged(self) -> bool:
        """True iff the base model's weights hash as before adaptation."""
        return weights_sha256(self.policy.model, skip="prompt_encoder") == self.base_sha256

    def run(self, tasks: list[UnlabeledTask], run_dir=None) -> dict[str, str]:
        out = super().run(tasks, run_dir)
        if not self.base_weights_unchanged():   # pragma: no cover - would be a bug
            raise RuntimeError("TASCO changed the base model's weights; only the prefix may train")
        return out

    # -- one optimisation step -----------------------------------------------------------------
    def adapt_step(self, tasks: list[UnlabeledTask], step: int) -> dict[str, float]:
        from deciplane.agents.policy import left_pad

        cfg = self.config
        gens = generate(self.prefix_policy, [self.format(t) for t in tasks],
                        max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature,
                        do_sample=True, num_return_sequences=cfg.samples, top_p=cfg.top_p,
                        seed=self.sample_seed(step), budget=self.budget)
        per: list[list[str | None]] = [[] for _ in tasks]
        for g, a in zip(gens, extract([g.text for g in gens])):
            per[g.prompt_index].append(a)
        for task, answers in zip(tasks, per):
            v = vote(answers)
            agree = v.agree if v.answer is not None else [False] * len(answers)
            self._record_vote(step, task, answers, v, [1.0 if a else 0.0 for a in agree])
        gens = [g for g in gens if g.response_ids.numel() > 0]
        total = sum(int(g.response_ids.numel()) for g in gens)
        metrics = {"tasco/entropy": 0.0, "tasco/instability": 0.0, "loss/total": 0.0}
        if total == 0:
            self.opt.skip()
            return {**metrics, "update/skipped": 1.0}
        pad = self.policy.tokenizer.pad_token_id
        dev = self.policy.device
        lengths_all = [int(g.response_ids.numel()) for g in gens]

        def loss_fn(rows: list[int]) -> MicroLoss:
            """Entropy + mu * instability of one micro-batch, a token mean (the engine
            scales it by the micro-batch's share of the answer tokens)."""
            part = [gens[i] for i in rows]
            seqs = [torch.cat([g.prompt_ids, g.response_ids]) for g in part]
            ids, attn = left_pad(seqs, pad)
            ids, attn = ids.to(dev), attn.to(dev)
            lengths = [lengths_all[i] for i in rows]
            width = max(lengths)
            mask = torch.zeros((len(part), width), dtype=torch.bool, device=dev)
            for i, n in enumerate(lengths):
                mask[i, width - n:] = True
            n_tok = int(attn.sum())

            def logits(eps=None):
                with self.budget.phase("forward"):
                    out = self.prefix.forward(ids, attn, eps, logits_to_keep=width + 1)
                self.budget.forward_tokens += n_tok
                self.budget.forward_passes += 1
                return out[:, :-1, :].float()      # predicts the answer tokens

            clean = logits()
            n_fwd = 1
            h = mean_entropy(clean, mask)
            spec = cfg.loss    # the loss config
            if spec.mu == 0:
                loss, d = h, torch.zeros(())
            else:
                if spec.perturbation == "sam":
                    with self.budget.phase("backward"):
                        (g,) = torch.autograd.grad(h, [self.prefix.weight], retain_graph=True)
                    self.budget.backward_tokens += n_tok
                    self.budget.backward_passes += 1
                    eps_list = sam_perturbation([g], spec.rho)
                else:
                    eps_list = [random_perturbation([self.prefix.weight], spec.sigma, self._gen)[0]
                                for _ in range(spec.n_draws)]
                    eps_list = [e.to(dev) for e in eps_list]
                perturbed = [logits(e) for e in eps_list]
                n_fwd += len(perturbed)
                out = tasco_loss(clean, perturbed, mask, spec.mu)
                loss, d = out.loss, torch.tensor(out.metrics["tasco/consistency_kl"])
            return MicroLoss(task=loss, tokens=n_tok * n_fwd,
                             metrics={"tasco/entropy": float(h.detach()),
                                      "tasco/instability": float(d),
                                      "loss/total": float(loss.detach())})

        metrics = optimizer_step(self.opt, list(range(len(gens))), cfg.micro_batch_size,
                                 loss_fn, Normaliser(lengths_all))
        if any(p.grad is not None for p in self.policy.model.parameters()):  # pragma: no cover
            raise RuntimeError("a base-model parameter received a gradient")
        metrics["update/skipped"] = 0.0
        metrics["answer_tokens"] = float(total)
        return metrics

    # -- prefix checkpoints -----------------------------------------------------------------
    def save_prefix(self, path: str | Path) -> Path:
        """Save the trained prefix (PEFT ``save_pretrained``)."""
        return self.prefix.save(path)

    @staticmethod
    def load_prefix(policy, path: str | Path, trunk_dtype: str = "float32"):
        """``(prefix model, prefix-conditioned policy)`` from a saved prefix on ``policy``'s
        base model (the base weights are not touched, unless ``trunk_dtype`` casts its
        linear layers as :class:`TASCOConfig`'s option does: a prefix trained on bf16
        linears answers the same only on them)."""
        from deciplane.agents.precision import cast_frozen_linears, resolve_trunk_dtype

        for p in policy.model.parameters():
            p.requires_grad_(False)
        cast_frozen_linears(policy.model, resolve_trunk_dtype(trunk_dtype, policy.device))
        pm = PrefixModel.load(policy.model, path)
        return pm, pm.policy(policy)


# the runner's helpers that lived here until 0.3 (deciplane._moved.RENAMED)
__getattr__ = renamed_names(__name__)


__all__ = ["TASCO", "TASCOConfig", "PrefixModel", "PrefixGenerator", "prefix_cache",
           "cache_to_prefix", "weights_sha256", "instability"]
