"""Frozen-trunk caching: run the frozen bottom of a decoder once, train only its top.

When only the top ``k`` decoder layers have trainable parameters (LoRA on the last ``k``
layers, or partial fine-tuning), the bottom ``L - k`` layers compute the same function of
the prompt at every update. :func:`trunk_hidden` runs them once, without a graph, and
returns the hidden state entering the first trainable layer (the *boundary*);
:func:`top_logits` runs only the top layers from it. The pair is exact: the same logits,
loss and gradients as a full forward, because the top layers see the same inputs, the same
causal mask and the same rotary positions (both are rebuilt from the attention mask and
position ids, which the caller passes unchanged).

How: a Hugging Face decoder (``LlamaModel`` and relatives) runs
``embed -> layers -> norm``; it accepts ``inputs_embeds`` instead of token ids. The two
calls temporarily narrow its layer list (and, for the trunk, replace the final norm by the
identity), so all of the model's own mask and position code runs as usual.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from deciplane.agents.menu import _cache_kwarg, _common_prefix_len
from deciplane.agents.policy import left_pad, narrowed_decoder as _layers, position_ids_from_mask
from deciplane.errors import ConfigError
from deciplane.types import Decision


def decoder_of(model: nn.Module) -> nn.Module:
    """The inner decoder (the module holding ``layers``, ``norm`` and ``embed_tokens``) of a
    causal LM, through PEFT wrappers."""
    m = model.get_base_model() if hasattr(model, "get_base_model") else model
    inner = getattr(m, "model", None)
    if inner is None or not isinstance(getattr(inner, "layers", None), nn.ModuleList) \
            or not hasattr(inner, "norm"):
        raise ConfigError(f"{type(m).__name__} has no decoder with `.model.layers` and "
                          "`.model.norm`; frozen-trunk caching supports Llama-style causal LMs")
    return inner


def first_trainable_layer(model: nn.Module) -> int:
    """Index of the lowest decoder layer holding a parameter with ``requires_grad``; the
    number of layers if none does. Everything below it is the frozen trunk."""
    decoder = decoder_of(model)
    for i, layer in enumerate(decoder.layers):
        if any(p.requires_grad for p in layer.parameters()):
            return i
    return len(decoder.layers)


def check_trunk_frozen(model: nn.Module, boundary: int) -> None:
    """Refuse a boundary under which something still trains (the cached states would be
    stale after an update): the embeddings and layers ``[0, boundary)`` must be frozen."""
    decoder = decoder_of(model)
    below = list(decoder.embed_tokens.parameters()) + [
        p for layer in decoder.layers[:boundary] for p in layer.parameters()]
    if any(p.requires_grad for p in below):
        raise ConfigError(f"frozen-trunk caching at layer {boundary}: a parameter below it is "
                          "trainable (embeddings or a lower layer); use a boundary <= "
                          f"{first_trainable_layer(model)} or freeze those parameters")


@torch.no_grad()
def trunk_hidden(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                 position_ids: torch.Tensor, boundary: int) -> torch.Tensor:
    """Hidden states entering layer ``boundary``, ``(B, T, H)``, computed without a graph."""
    check_trunk_frozen(model, boundary)
    decoder = decoder_of(model)
    with _layers(decoder, nn.ModuleList(list(decoder.layers)[:boundary]), nn.Identity()):
        out = decoder(input_ids=input_ids, attention_mask=attention_mask,
                      position_ids=position_ids, use_cache=False)
    # a bf16 trunk (deciplane.agents.precision) hands fp32 states to the layers above it
    return out.last_hidden_state.float()                                  # (B, T, H)


def top_logits(model: nn.Module, hidden: torch.Tensor, attention_mask: torch.Tensor,
               position_ids: torch.Tensor, boundary: int, logits_to_keep: int = 0
               ) -> torch.Tensor:
    """Logits of the full model from the boundary hidden states ``(B, T, H)`` (with the
    graph of the top layers): ``(B, T', V)`` with ``T' = logits_to_keep or T``."""
    decoder = decoder_of(model)
    with _layers(decoder, nn.ModuleList(list(decoder.layers)[boundary:])):
        out = model(inputs_embeds=hidden, attention_mask=attention_mask,
                    position_ids=position_ids, use_cache=False, logits_to_keep=logits_to_keep)
    return out.logits


def trunk_boundary(model: nn.Module) -> int | None:
    """The boundary a frozen-trunk update can use for ``model``: its first trainable decoder
    layer when that is above layer 0 and nothing below it (embeddings included) trains;
    ``None`` otherwise (full fine-tuning, LoRA in every layer, or a model that is not a
    Llama-style decoder)."""
    try:
        b = first_trainable_layer(model)
        if not 0 < b < len(decoder_of(model).layers):
            return None
        check_trunk_frozen(model, b)
    except ConfigError:
        return None
    return b


MIN_SHARED_PREFIX = 16
"""Shorter token prefixes shared by an update batch are not run separately."""


def menu_update_logits(model: nn.Module, decisions: Sequence[Decision], boundary: int,
                       pad_id: int, device: torch.device | str = "cpu",
                       shared_prefix: bool = True) -> torch.Tensor:
    """Last-position logits ``(B, V)`` of the decisions' prompts (left padded, with the
    graph of the top layers only), the frozen-trunk replacement of the menu agent's full
    update forward.

    The trunk's output comes from the rollout (``Decision.boundary_hidden`` kept at this
    ``boundary``) when every decision has it, else it is recomputed here without a graph
    (:func:`trunk_hidden`: still no graph and no backward through the trunk). With
    ``shared_prefix`` the token prefix common to the batch (chat header, system prompt)
    runs through the top layers once, with its graph, and its keys/values are shared by
    every row (the gradient through the shared cache sums over the rows, as it would over
    the rows' own copies).
    """
    prompts = [d.prompt_ids for d in decisions]
    if all(d.boundary_hidden is not None and d.boundary_layer == boundary for d in decisions):
        check_trunk_frozen(model, boundary)
        rows = []
        for i, d in enumerate(decisions):
            if d.boundary_hidden.shape[0] != int(d.prompt_ids.numel()):
                raise ConfigError(f"decision {i}: boundary_hidden has {d.boundary_hidden.shape[0]} "
                                  f"positions but its prompt {int(d.prompt_ids.numel())} tokens; "
                                  "drop the cached states")
            rows.append(d.boundary_hidden.to(device))
    else:
        ids, mask = left_pad(prompts, pad_id)
        h = trunk_hidden(model, ids.to(device), mask.to(device),
                         position_ids_from_mask(mask).to(device), boundary)      # (B, T, H)
        rows = [h[i, h.shape[1] - int(p.numel()):] for i, p in enumerate(prompts)]
    n = _common_prefix_len(prompts) if shared_prefix and len(prompts) > 1 else 0
    n = min(n, min(int(p.numel()) for p in prompts) - 1)     # every row keeps >= 1 token
    if n < MIN_SHARED_PREFIX:
        n = 0
    decoder = decoder_of(model)
    cache_kw = {}
    if n:
        with _layers(decoder, nn.ModuleList(list(decoder.layers)[boundary:])):
            # the decoder alone: no output layer (nothing to read at the prefix)
            out = decoder(inputs_embeds=rows[0][None, :n], attention_mask=torch.ones(
                1, n, dtype=torch.long, device=device), position_ids=torch.arange(
                n, device=device)[None], use_cache=True)
        cache = getattr(out, "cache", None) or out.past_key_values
        # (layers a truncated decoder never ran, above an item head, hold no keys)
        top = [layer for layer in cache.layers[boundary:] if layer.keys is not None]
        for layer in top:                # the prefix's keys/values, shared by every row
            layer.keys = layer.keys.expand(len(rows), -1, -1, -1)
            layer.values = layer.values.expand(len(rows), -1, -1, -1)
        for layer in cache.layers[:boundary]:
            # never run; they only tell the mask code the cached length (read from layer 0)
            layer.__dict__.update(top[0].__dict__)
        cache_kw = {_cache_kwarg(model): cache}
    widths = [int(r.shape[0]) - n for r in rows]
    width = max(widths)
    hidden = rows[0].new_zeros((len(rows), width, rows[0].shape[-1]))           # (B, S, H)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (r, w) in enumerate(zip(rows, widths)):
        hidden[i, width - w:] = r[n:]
        mask[i, width - w:] = 1
    pos = (n + position_ids_from_mask(mask)).to(device)
    full_mask = torch.cat([torch.ones(len(rows), n, dtype=torch.long), mask], 1).to(device)
    with _layers(decoder, nn.ModuleList(list(decoder.layers)[boundary:])):
        out = model(inputs_embeds=hidden, attention_mask=full_mask, position_ids=pos,
                    use_cache=bool(n), logits_to_keep=1, **cache_kw)
    return out.logits[:, -1, :]


class TrunkStates:
    """Boundary hidden states of token sequences, each computed once (no graph) and reused
    by every later forward of the same sequence: the GRPO step's old-policy, reference and
    training forwards (LoRA on the top layers only: the reference — adapters off — has the
    same trunk).

    Called as the ``forward`` of :func:`deciplane.agents.policy.score_responses`:
    ``states(model, ids, attention_mask, position_ids, logits_to_keep) -> logits``.
    Memory: ``tokens x hidden x 4`` bytes per sequence, held as long as the object.
    """

    def __init__(self, boundary: int) -> None:
        self.boundary = boundary
        self._rows: dict[tuple[int, ...], torch.Tensor] = {}
        self.computed_tokens = 0     # tokens run through the trunk

    def seed(self, seq_ids: torch.Tensor, hidden: torch.Tensor) -> None:
        """Use ``hidden`` ``(T, H)`` (e.g. kept by the sampling forwards) as the boundary
        states of the token sequence ``seq_ids`` ``(T,)``."""
        if hidden.shape[0] != int(seq_ids.numel()):
            raise ConfigError(f"boundary states for {hidden.shape[0]} positions but the "
                              f"sequence has {int(seq_ids.numel())} tokens")
        self._rows[tuple(seq_ids.tolist())] = hidden

    def hidden(self, model: nn.Module, ids: torch.Tensor, attention_mask: torch.Tensor,
               position_ids: torch.Tensor) -> torch.Tensor:
        """``(B, T, H)`` boundary states of the left-padded batch (zeros on padding)."""
        rows = [tuple(r[m.bool()].tolist()) for r, m in zip(ids.cpu(), attention_mask.cpu())]
        todo = [k for k in dict.fromkeys(rows) if k not in self._rows]
        if todo:
            sub, mask = left_pad([torch.tensor(k, dtype=torch.long) for k in todo], 0)
            h = trunk_hidden(model, sub.to(ids.device), mask.to(ids.device),
                             position_ids_from_mask(mask).to(ids.device), self.boundary)
            for j, k in enumerate(todo):
                self._rows[k] = h[j, h.shape[1] - len(k):].clone()
            self.computed_tokens += int(mask.sum())
        width = ids.shape[1]
        first = self._rows[rows[0]]
        # on the batch's device: seeded rows may be on the CPU (the sampler keeps them there)
        out = first.new_zeros((len(rows), width, first.shape[-1]), device=ids.device)
        for i, k in enumerate(rows):
            out[i, width - len(k):] = self._rows[k]
        return out

    def __call__(self, model: nn.Module, ids: torch.Tensor, attention_mask: torch.Tensor,
                 position_ids: torch.Tensor, logits_to_keep: int) -> torch.Tensor:
        hidden = self.hidden(model, ids, attention_mask, position_ids)
        return top_logits(model, hidden, attention_mask, position_ids, self.boundary,
                          logits_to_keep=logits_to_keep)


__all__ = ["decoder_of", "first_trainable_layer", "check_trunk_frozen", "trunk_hidden",
           "top_logits", "trunk_boundary", "menu_update_logits", "TrunkStates"]
