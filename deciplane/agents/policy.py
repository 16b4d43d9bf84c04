"""``Policy``: a causal LM and its tokenizer, with the few operations agents and trainers need.

Generation with per-token log-probs, batched log-probs of given responses (with grad),
LoRA, a frozen reference view, and checkpoints. Batches are left padded; position ids
always come from the attention mask, so padding never changes a result.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import torch
from torch import nn

from deciplane.errors import ConfigError

POLICY_META = "deciplane_policy.json"
ITEM_HEAD_FILE = "item_head.pt"
DEFAULT_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass
class Generation:
    """One sampled response.

    ``response_ids`` is unpadded: it ends with the eos (or stop) token when one was
    produced and contains nothing after it. ``response_logprobs[j]`` is
    ``log_softmax(logits / temperature)`` of token ``j`` (detached).
    """

    prompt_index: int
    prompt_ids: torch.Tensor          # (T,) int64
    response_ids: torch.Tensor        # (R,) int64
    response_logprobs: torch.Tensor   # (R,) float32
    text: str
    boundary_hidden: torch.Tensor | None = None  # (T + R, H) states entering keep_layer

    @property
    def logprob(self) -> float:
        """Sum of the response tokens' log-probs (the sequence log-prob)."""
        return float(self.response_logprobs.sum())


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions that count only real tokens: ``cumsum(mask) - 1``, pads clamped to 0."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)  # (B, T)


def left_pad(seqs: Sequence[torch.Tensor], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack 1-D id tensors into ``(B, T)`` ids and mask, padding on the left."""
    width = max(int(s.numel()) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        n = int(s.numel())
        if n:
            ids[i, width - n:] = s.to(torch.long)
            mask[i, width - n:] = 1
    return ids, mask


def unpad_left(x: torch.Tensor, lengths: Sequence[int]) -> list[torch.Tensor]:
    """Row ``i``'s last ``lengths[i]`` entries of a left-padded ``(B, T, ...)`` batch (the
    inverse of :func:`left_pad`; responses of a :class:`ResponseForward` are right-aligned
    the same way)."""
    width = x.shape[1]
    return [x[i, width - int(n):] for i, n in enumerate(lengths)]


@dataclass
class ResponseForward:
    """Per-token results of one batched forward, responses right-aligned in ``(B, R)``."""

    logp: torch.Tensor                       # (B, R) log-prob of each response token
    mask: torch.Tensor                       # (B, R) bool, true on response tokens
    n_tokens: int                            # non-pad tokens processed (prompt + response)
    entropy: torch.Tensor | None = None      # (B, R) entropy of the token distribution
    full_logp: torch.Tensor | None = None    # (B, R, V) log-softmax over the vocabulary


def score_responses(policy, prompt_ids: Sequence[torch.Tensor],
                    response_ids: Sequence[torch.Tensor], *, temperature: float = 1.0,
                    with_entropy: bool = False, full: bool = False, grad: bool | None = True,
                    model: nn.Module | None = None, forward=None) -> ResponseForward:
    """THE teacher-forced forward: log-probs of ``response_ids[i]`` given ``prompt_ids[i]``
    in one batched forward over ``prompt + response`` (left padded).

    Logits are divided by ``temperature`` (the sampling temperature, as the sampler's
    log-probs were); only the last ``max R + 1`` positions get logits. ``model``
    overrides ``policy.model`` (e.g. the module yielded by ``policy.reference()``).
    ``grad=False`` runs under ``torch.no_grad()``, ``grad=None`` in the caller's grad
    mode. ``full=True`` also returns the log-softmax over the vocabulary (distillation).
    :func:`deciplane.engine.logprobs.forward_responses` is this, counted in a budget;
    :meth:`Policy.sequence_logprobs` is this, unpadded into a list. ``forward(model, ids,
    attention_mask, position_ids, logits_to_keep) -> logits`` replaces the model call (the
    engine's frozen-trunk states, :class:`deciplane.engine.trunk.TrunkStates`).
    """
    if len(prompt_ids) != len(response_ids) or not prompt_ids:
        raise ConfigError(f"need one response per prompt and at least one pair, got "
                          f"{len(prompt_ids)} prompts and {len(response_ids)} responses")
    model = policy.model if model is None else model
    seqs = [torch.cat([p.long().cpu(), r.long().cpu()]) for p, r in zip(prompt_ids, response_ids)]
    ids, attn = left_pad(seqs, policy.tokenizer.pad_token_id)                   # (B, L)
    lengths = [int(r.numel()) for r in response_ids]
    width = max(lengths)
    keep = width + 1
    dev = policy.device
    ctx = (contextlib.nullcontext() if grad is None
           else torch.enable_grad() if grad else torch.no_grad())
    with ctx:
        if forward is not None:
            all_logits = forward(model, ids.to(dev), attn.to(dev),
                                 position_ids_from_mask(attn).to(dev), keep)
        else:
            all_logits = model(input_ids=ids.to(dev), attention_mask=attn.to(dev),
                               position_ids=position_ids_from_mask(attn).to(dev), use_cache=False,
                               logits_to_keep=keep).logits
        logits = all_logits[:, -keep:-1, :].float() / temperature             # (B, R, V)
        targets = ids[:, ids.shape[1] - width:].to(dev)                        # (B, R)
        full_logp = torch.log_softmax(logits, dim=-1)                          # (B, R, V)
        logp = full_logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)         # (B, R)
        entropy = None
        if with_entropy:
            entropy = -(full_logp.exp() * full_logp).sum(-1)                   # (B, R)
    n = torch.tensor(lengths)[:, None]                                          # (B, 1)
    mask = torch.arange(width)[None, :] >= width - n                           # (B, R)
    return ResponseForward(logp=logp, mask=mask.to(dev), n_tokens=int(attn.sum()),
                           entropy=entropy, full_logp=full_logp if full else None)


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The decoder layer list of a Llama-style causal LM (``.model.layers``), through PEFT."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    layers = getattr(getattr(base, "model", None), "layers", None)
    if not isinstance(layers, nn.ModuleList):
        raise ConfigError(f"{type(base).__name__} has no decoder layers at `.model.layers`; "
                          "frozen-trunk caching supports Llama-style causal LMs")
    return layers


@contextlib.contextmanager
def capture_layer_input(model: nn.Module, layer: int | None, *, detach: bool = True
                        ) -> Iterator[list[torch.Tensor] | None]:
    """While active, appends the (detached) input hidden states of decoder layer ``layer``
    of every forward to the yielded list; ``None`` (and nothing hooked) for ``layer=None``."""
    if layer is None:
        yield None
        return
    seen: list[torch.Tensor] = []

    def hook(module, args, kwargs):
        h = args[0] if args else kwargs["hidden_states"]
        seen.append((h.detach() if detach else h).float())   # fp32 even inside a bf16 trunk

    handle = decoder_layers(model)[layer].register_forward_pre_hook(hook, with_kwargs=True)
    try:
        yield seen
    finally:
        handle.remove()


class ChosenTokenLogprobs:
    """The log-probs of the tokens ``generate`` emits, kept one step at a time: the next
    token's logits of the last forward (``(B, V)``) are held until the following forward
    shows which token was chosen (its ``input_ids``), then reduced to that token's
    ``log_softmax(logits / temperature)``. Memory: two ``(B, V)`` rows instead of every
    step's logits (``output_logits=True`` kept ``(B, R, V)`` on the device and again on the
    host: 32 samples x 1,024 tokens x 151,936 ids ~ 20 GB for Qwen2.5's vocabulary)."""

    def __init__(self, temperature: float) -> None:
        self.temperature = temperature
        self.pending: torch.Tensor | None = None     # (B, V) logits of the next token
        self.steps: list[torch.Tensor] = []          # (B,) log-prob per emitted token

    def _reduce(self, tokens: torch.Tensor) -> None:
        assert self.pending is not None
        logits = self.pending.float() / self.temperature
        tok = tokens.to(logits.device).long().unsqueeze(-1)
        self.steps.append(torch.log_softmax(logits, dim=-1).gather(-1, tok).squeeze(-1).cpu())
        self.pending = None

    def before_forward(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if self.pending is not None and ids is not None:  # a decode step feeds the choice
            self._reduce(ids[:, -1])

    def after_forward(self, module: nn.Module, args: tuple, kwargs: dict, output) -> None:
        self.pending = output.logits[:, -1, :].detach()

    def finish(self, last_tokens: torch.Tensor) -> torch.Tensor:
        """``(B, R)`` log-probs, the last emitted token (never fed back) included."""
        if self.pending is not None:
            self._reduce(last_tokens)
        return torch.stack(self.steps, dim=1)


@contextlib.contextmanager
def chosen_token_logprobs(model: nn.Module, temperature: float
                          ) -> Iterator[ChosenTokenLogprobs]:
    """While active, ``model``'s forwards (those of ``generate``) feed a
    :class:`ChosenTokenLogprobs`; hooked on the causal LM whose forward ``generate`` runs:
    under PEFT its base model (``PeftModel.generate`` calls that one's forward), for a
    stand-in that generates with another model (TASCO's prefix model) the module its
    ``generation_forward_module()`` names."""
    if hasattr(model, "generation_forward_module"):
        base = model.generation_forward_module()
    else:
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
    rec = ChosenTokenLogprobs(temperature)
    pre = base.register_forward_pre_hook(rec.before_forward, with_kwargs=True)
    post = base.register_forward_hook(rec.after_forward, with_kwargs=True)
    try:
        yield rec
    finally:
        pre.remove()
        post.remove()


@contextlib.contextmanager
def capture_hidden(model: nn.Module, layer: int | None, *, detach: bool = True
                   ) -> Iterator[list[torch.Tensor] | None]:
    """While active, appends the hidden states read at ``layer`` by every forward to the
    yielded list: the input of decoder layer ``layer`` (``0 <= layer < L``), or for
    ``layer == L`` the decoder's final, normed output. ``detach=False`` keeps the graph
    (a readout trained through the layers below it). ``None`` for ``layer=None``."""
    if layer is None:
        yield None
        return
    layers = decoder_layers(model)
    if not 0 <= layer <= len(layers):
        raise ConfigError(f"readout layer {layer} is not in 0..{len(layers)} (the model has "
                          f"{len(layers)} decoder layers; {len(layers)} = the final output)")
    if layer < len(layers):
        with capture_layer_input(model, layer, detach=detach) as seen:
            yield seen
        return
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    seen: list[torch.Tensor] = []

    def hook(module, args, output):
        seen.append(output.detach() if detach else output)

    handle = base.model.norm.register_forward_hook(hook)
    try:
        yield seen
    finally:
        handle.remove()


class _Recorder(nn.Module):
    """Stands in for the final norm of a truncated decoder: records its input and returns it,
    in fp32 (the states of a bf16 trunk, deciplane.agents.precision, go on to fp32 code)."""

    def __init__(self, seen: list[torch.Tensor], detach: bool) -> None:
        super().__init__()
        self.seen = seen
        self.detach = detach

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.float()
        self.seen.append(x.detach() if self.detach else x)
        return x


@contextlib.contextmanager
def truncated_decoder(model: nn.Module, upto: int, *, detach: bool = True
                      ) -> Iterator[list[torch.Tensor]]:
    """While active, the model's decoder runs only layers ``[0, upto)`` and no final norm;
    the yielded list receives their output (the input of layer ``upto``) per forward
    (``detach=False``: with its graph). The output layer then reads un-normed states: its
    logits are meaningless (a readout that uses only the recorded states stops here).
    Code that narrows the layer list again inside (the frozen-trunk update) narrows this
    truncated list."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder = base.model
    seen: list[torch.Tensor] = []
    with narrowed_decoder(decoder, nn.ModuleList(list(decoder.layers)[:upto]), _Recorder(seen, detach)):
        yield seen


@contextlib.contextmanager
def narrowed_decoder(decoder: nn.Module, layers: nn.ModuleList, norm: nn.Module | None = None
                     ) -> Iterator[None]:
    """While active, ``decoder`` runs ``layers`` instead of its own (and ``norm`` instead of
    its final norm, if given); the model's own mask and position code runs as usual."""
    old_layers, old_norm = decoder.layers, decoder.norm
    decoder.layers = layers
    if norm is not None:
        decoder.norm = norm
    try:
        yield
    finally:
        decoder.layers, decoder.norm = old_layers, old_norm


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of ``softmax(logits)`` over the last dim."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


class Policy:
    """A causal LM + tokenizer (``padding_side="left"``, pad token set).

    Attributes: ``model`` (an ``nn.Module``; a PEFT model after :meth:`add_lora`),
    ``tokenizer``, ``name`` (what it was loaded from), ``device``.
    """

    def __init__(self, model: nn.Module, tokenizer, name: str, device: str | torch.device = "cpu",
                 *, source: str | None = None):
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        self.device = torch.device(device)
        self.source = source or name  # what load_policy() needs to rebuild the base model
        self._reference: nn.Module | None = None
        tokenizer.padding_side = "left"
        if tokenizer.pad_token_id is None:
            if tokenizer.eos_token_id is None:
                raise ConfigError(f"tokenizer of {name!r} has neither a pad nor an eos token; "
                                  "set tokenizer.pad_token before building a Policy")
            tokenizer.pad_token = tokenizer.eos_token
        self.model.to(self.device)

    # ---- text <-> ids ------------------------------------------------------------------
    @property
    def eos_token_ids(self) -> list[int]:
        """Token ids that end a response: the tokenizer's eos plus the model's generation eos."""
        ids = {self.tokenizer.eos_token_id}
        gen = getattr(self._base_model(), "generation_config", None)
        extra = getattr(gen, "eos_token_id", None) if gen is not None else None
        if isinstance(extra, int):
            ids.add(extra)
        elif extra:
            ids.update(extra)
        return sorted(i for i in ids if i is not None)

    def format_prompt(self, user_text: str, system: str | None = None) -> str:
        """The chat-templated prompt with the generation cue, or plain text without a template."""
        if getattr(self.tokenizer, "chat_template", None):
            messages = ([{"role": "system", "content": system}] if system else [])
            messages.append({"role": "user", "content": user_text})
            return self.tokenizer.apply_chat_template(messages, tokenize=False,
                                                      add_generation_prompt=True)
        return (f"{system}\n\n" if system else "") + user_text

    def tokenize(self, text: str) -> torch.Tensor:
        """``(T,)`` ids of one already-formatted prompt (no special tokens added: the chat
        template, if any, has already written them)."""
        ids = self.tokenizer(text, add_special_tokens=self._add_special_tokens(text))["input_ids"]
        return torch.tensor(ids, dtype=torch.long)

    def tokenize_with_offsets(self, text: str) -> tuple[torch.Tensor, list[tuple[int, int]]]:
        """:meth:`tokenize` plus each token's character range in ``text`` (a fast
        tokenizer's offsets; the items readout finds the menu entries' tokens with them)."""
        enc = self.tokenizer(text, add_special_tokens=self._add_special_tokens(text),
                             return_offsets_mapping=True)
        return (torch.tensor(enc["input_ids"], dtype=torch.long),
                [tuple(o) for o in enc["offset_mapping"]])

    def encode(self, prompts: list[str]) -> dict[str, torch.Tensor]:
        """``input_ids`` / ``attention_mask`` ``(B, T)``, left padded, on ``self.device``."""
        ids, mask = left_pad([self.tokenize(p) for p in prompts], self.tokenizer.pad_token_id)
        return {"input_ids": ids.to(self.device), "attention_mask": mask.to(self.device)}

    def _add_special_tokens(self, text: str) -> bool:
        bos = self.tokenizer.bos_token
        return not (bos and text.startswith(bos)) and not getattr(self.tokenizer, "chat_template", None)

    # ---- sampling ------------------------------------------------------------------------
    @torch.no_grad()
    def generate(self, prompts: list[str], *, max_new_tokens: int, temperature: float = 1.0,
                 do_sample: bool = True, num_return_sequences: int = 1, top_p: float = 1.0,
                 seed: int | None = None, stop: Sequence[str] | None = None,
                 keep_layer: int | None = None) -> list[Generation]:
        """Sample ``num_return_sequences`` responses per prompt, prompt-major order.

        ``stop``: extra strings that end a response (kept in it, like eos). Log-probs are
        ``log_softmax(logits / temperature)`` of the emitted tokens, whatever ``top_p``.
        ``keep_layer``: also keep, per generation, the hidden states entering that decoder
        layer at every position of prompt + response (``Generation.boundary_hidden``, from
        the sampling forwards themselves; the last response token is never fed back, and no
        logit is ever read at its position, so its row is zeros).
        """
        if max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if temperature <= 0:
            raise ConfigError(f"temperature must be > 0, got {temperature}; use do_sample=False for greedy")
        if not prompts:
            return []
        prompt_ids = [self.tokenize(p) for p in prompts]
        ids, mask = left_pad(prompt_ids, self.tokenizer.pad_token_id)
        width = ids.shape[1]
        stop_ids, stop_strings = self._split_stops(stop)
        kwargs = dict(max_new_tokens=max_new_tokens, do_sample=do_sample,
                      num_return_sequences=num_return_sequences, return_dict_in_generate=True,
                      pad_token_id=self.tokenizer.pad_token_id,
                      eos_token_id=sorted(set(self.eos_token_ids) | set(stop_ids)))
        if do_sample:
            kwargs.update(temperature=temperature, top_p=top_p, top_k=0)
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        if stop_strings:
            kwargs.update(stop_strings=stop_strings, tokenizer=self.tokenizer)
        model = self.model
        was_training = model.training
        model.eval()
        try:
            with torch.random.fork_rng(devices=self._rng_devices()):
                if seed is not None:
                    torch.manual_seed(seed)
                with capture_layer_input(model, keep_layer) as cap, \
                        chosen_token_logprobs(model, temperature) as chosen:
                    out = model.generate(input_ids=ids.to(self.device),
                                         attention_mask=mask.to(self.device), **kwargs)
        finally:
            model.train(was_training)
        seqs = out.sequences[:, width:].cpu()                                  # (B*n, R)
        logp = chosen.finish(seqs[:, -1])                                      # (B*n, R)
        if logp.shape != seqs.shape:
            raise RuntimeError(f"generate ran {logp.shape[1]} decode steps for "
                               f"{seqs.shape[1]} new tokens")
        ends = self._response_lengths(seqs, stop_strings, extra_eos=stop_ids)
        hidden = torch.cat(cap, dim=1).cpu() if cap else None            # (B*n, W + s, H)
        gens = []
        for row in range(seqs.shape[0]):
            p = row // num_return_sequences
            n = ends[row]
            resp = seqs[row, :n].clone()
            kept = None
            if hidden is not None:
                t = int(prompt_ids[p].numel())
                # prompt: the prefill; response token i: fed back at decode step i + 1
                kept = torch.cat([hidden[row, width - t:width + n - 1],
                                  hidden.new_zeros((1, hidden.shape[-1]))])       # (t + n, H)
            gens.append(Generation(prompt_index=p, prompt_ids=prompt_ids[p], response_ids=resp,
                                   response_logprobs=logp[row, :n].clone(),
                                   text=self.tokenizer.decode(resp, skip_special_tokens=True),
                                   boundary_hidden=kept))
        return gens

    def _split_stops(self, stop: Sequence[str] | None) -> tuple[list[int], list[str]]:
        """Stop strings that are one token become extra eos ids (cheap to check while
        generating); the others go to transformers' ``stop_strings``."""
        ids, strings = [], []
        for s in stop or ():
            tok = self.tokenizer(s, add_special_tokens=False)["input_ids"]
            if len(tok) == 1 and self.tokenizer.decode(tok) == s:
                ids.append(int(tok[0]))
            else:
                strings.append(s)
        return ids, strings

    def _response_lengths(self, seqs: torch.Tensor, stop: Sequence[str] | None,
                          extra_eos: Sequence[int] = ()) -> list[int]:
        """Length of each generated row up to and including its first eos / stop string."""
        eos = set(self.eos_token_ids) | set(extra_eos)
        lengths = []
        for row in seqs.tolist():
            n = len(row)
            for j, t in enumerate(row):
                if t in eos:
                    n = j + 1
                    break
            if stop:
                n = self._cut_at_stop(row[:n], stop, n)
            lengths.append(n)
        return lengths

    def _cut_at_stop(self, row: list[int], stop: Sequence[str], n: int) -> int:
        """Shortest prefix of ``row`` whose decoded text contains a stop string."""
        text = self.tokenizer.decode(row, skip_special_tokens=False)
        if not any(s in text for s in stop):
            return n
        for j in range(1, len(row) + 1):
            if any(s in self.tokenizer.decode(row[:j], skip_special_tokens=False) for s in stop):
                return j
        return n

    def _rng_devices(self) -> list:
        return [self.device] if self.device.type == "cuda" else []

    # ---- scoring ---------------------------------------------------------------------------
    def sequence_logprobs(self, prompt_ids: list[torch.Tensor], response_ids: list[torch.Tensor], *,
                          temperature: float = 1.0, with_entropy: bool = False, model: nn.Module | None = None):
        """Per-token log-probs ``(R_i,)`` of each response given its prompt, in the
        caller's grad mode (:func:`score_responses` unpadded into a list). Returns a list,
        or ``(logprobs, entropies)`` with ``with_entropy=True``."""
        if len(prompt_ids) != len(response_ids):
            raise ConfigError(f"got {len(prompt_ids)} prompts but {len(response_ids)} responses; pass one each")
        if not prompt_ids:
            return ([], []) if with_entropy else []
        fwd = score_responses(self, prompt_ids, response_ids, temperature=temperature,
                              with_entropy=with_entropy, grad=None, model=model)
        lengths = [int(r.numel()) for r in response_ids]
        logps = unpad_left(fwd.logp, lengths)
        return (logps, unpad_left(fwd.entropy, lengths)) if with_entropy else logps

    # ---- training helpers ----------------------------------------------------------------
    def add_lora(self, r: int = 8, alpha: int = 16, dropout: float = 0.0,
                 target_modules: Sequence[str] | None = None) -> None:
        """Wrap the model in a PEFT LoRA ``PeftModel``; only the adapters stay trainable."""
        from peft import LoraConfig, get_peft_model

        if self.is_lora:
            raise ConfigError(f"policy {self.name!r} already has LoRA adapters; add them once")
        config = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, bias="none",
                            target_modules=list(target_modules or self._lora_targets()),
                            task_type="CAUSAL_LM")
        self.model = get_peft_model(self.model, config)
        self._reference = None

    def _lora_targets(self) -> list[str]:
        names = {n.rsplit(".", 1)[-1] for n, m in self.model.named_modules() if isinstance(m, nn.Linear)}
        found = [t for t in DEFAULT_LORA_TARGETS if t in names]
        if not found:
            raise ConfigError(f"no default LoRA target ({', '.join(DEFAULT_LORA_TARGETS)}) in {self.name!r}; "
                              f"pass target_modules= from: {sorted(names)}")
        return found

    # ---- the items readout's head ----------------------------------------------------------
    @property
    def item_head(self) -> nn.Module | None:
        """The menu agent's item head (:class:`deciplane.agents.readout.ItemHead`) or None."""
        from deciplane.agents.readout import ITEM_HEAD_NAME

        return getattr(self.model, ITEM_HEAD_NAME, None)

    def add_item_head(self, layer: int | None = None, rank: int | None = None,
                      kind: str = "bilinear", mlp_hidden: int | None = None) -> nn.Module:
        """Attach a trainable item head reading decoder layer ``layer``'s input (``None``:
        the final, normed output) to the model, so that the optimizer, checkpoints and
        :meth:`save` include it. ``kind``: ``"bilinear"`` or ``"mlp"`` (a residual MLP of
        width ``mlp_hidden`` on each state before the score;
        :class:`~deciplane.agents.readout.ItemHead`). Returns the head."""
        from deciplane.agents.readout import DEFAULT_ITEM_RANK, ITEM_HEAD_NAME, ItemHead

        if self.item_head is not None:
            raise ConfigError(f"policy {self.name!r} already has an item head; add it once")
        n = len(decoder_layers(self.model))
        layer = n if layer is None else int(layer)
        if not 0 < layer <= n:
            raise ConfigError(f"item head layer {layer}: choose 1..{n} ({n} = the final "
                              "output, null in configs)")
        hidden = int(self._base_model().config.hidden_size)
        head = ItemHead(hidden, layer, rank or DEFAULT_ITEM_RANK, kind=kind,
                        mlp_hidden=mlp_hidden).to(self.device)
        self.model.add_module(ITEM_HEAD_NAME, head)
        return head

    @property
    def is_lora(self) -> bool:
        try:
            from peft import PeftModel
        except ImportError:  # pragma: no cover
            return False
        return isinstance(self.model, PeftModel)

    def _base_model(self) -> nn.Module:
        return self.model.get_base_model() if self.is_lora else self.model

    def freeze_reference(self) -> None:
        """Snapshot the current weights as the frozen reference (full fine-tuning only).

        Called automatically by :meth:`trainable_parameters` and :meth:`reference`, so
        build optimizers through ``trainable_parameters()`` before the first update."""
        if self.is_lora or self._reference is not None:
            return
        ref = copy.deepcopy(self.model)
        ref.eval()
        for p in ref.parameters():
            p.requires_grad_(False)
        self._reference = ref

    @contextlib.contextmanager
    def reference(self) -> Iterator[nn.Module]:
        """A view of the frozen initial policy: adapters disabled (LoRA), or a frozen deep
        copy taken before the first update (full fine-tuning)."""
        if self.is_lora:
            with self.model.disable_adapter():
                yield self.model
        else:
            self.freeze_reference()
            yield self._reference

    def trainable_parameters(self) -> list[nn.Parameter]:
        """Parameters with ``requires_grad`` (LoRA adapters only, after :meth:`add_lora`)."""
        self.freeze_reference()
        return [p for p in self.model.parameters() if p.requires_grad]

    # ---- checkpoints -----------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Save LoRA adapters (plus the base model's name) or full weights, and the tokenizer."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        if self.is_lora:
            self.model.save_pretrained(path / "adapter")
            meta = {"kind": "lora", "base": self.source, "name": self.name}
        else:
            self.model.save_pretrained(path / "model")
            meta = {"kind": "full", "name": self.name, "base": self.source}
        self.tokenizer.save_pretrained(path / "model" if not self.is_lora else path / "tokenizer")
        from deciplane.utils import atomic_write_json

        head = self.item_head
        if head is not None:   # neither PEFT nor save_pretrained knows it
            torch.save(head.state_dict(), path / ITEM_HEAD_FILE)
            meta["item_head"] = head.describe()

        atomic_write_json(path / POLICY_META, meta)
        return path

    @classmethod
    def load(cls, path: str | Path, *, dtype: torch.dtype = torch.float32, device: str | None = None,
             trainable: bool = True) -> "Policy":
        """Deprecated in 0.2 (goes away in the next release): use
        ``deciplane.agents.load_policy(path)``, which loads a folder written by
        :meth:`save` (or :func:`deciplane.agents.loading.load_saved_policy`)."""
        import warnings

        from deciplane.agents.loading import load_saved_policy  # one-release shim

        warnings.warn("Policy.load(path) is deprecated; use deciplane.agents.load_policy(path)",
                      DeprecationWarning, stacklevel=2)
        return load_saved_policy(path, dtype=dtype, device=device, trainable=trainable)

    def __repr__(self) -> str:
        n = sum(p.numel() for p in self.model.parameters())
        return f"Policy({self.name!r}, params={n / 1e6:.1f}M, device={self.device}, lora={self.is_lora})"
