"""The decision-plane menu agent (RLiD, docs/methods.md §1).

The legal actions are compiled into a lettered menu whose labels are single tokens; one
forward pass gives the next-token logits after the answer cue, and the policy is the
softmax over the menu's label logits only. Nothing is generated or parsed, so every
decision is executable.

Speed: a batch is one left-padded forward pass that computes logits for the last
position only; the token prefix shared by the whole batch (chat header, system prompt,
and for a group of environments started from the same state, most of the observation)
is run once and its KV cache reused for every row, and across calls while the weights
are unchanged; identical prompts (the episodes of a group start from the same state) are
computed once.

Frozen-trunk caching: with ``keep_boundary=b`` the rollout forward also keeps, on each
decision, the hidden states entering decoder layer ``b`` (``Decision.boundary_hidden``,
the shared prefix's computed once); a trainer whose trainable weights all sit at or above
layer ``b`` then runs only the top layers in its update (``update_logits``, set from
:mod:`deciplane.engine.trunk`).
"""

from __future__ import annotations

import re
from typing import Callable, Sequence

import torch

from deciplane.agents.labels import DEFAULT_LABELS, LabelAlphabet, compile_alphabet
from deciplane.agents.policy import (Policy, capture_hidden, capture_layer_input, decoder_layers,
                                     left_pad, position_ids_from_mask, truncated_decoder,
                                     unpad_left)
from deciplane.agents.prompt_cache import Block, BlockCache, block_bounds, chain_keys
from deciplane.agents.prompts import MENU_CUE, MENU_SYSTEM_PROMPT, menu_lines, menu_user_text
from deciplane.agents.readout import (ITEM_HEAD_NAME, ItemHead, check_readout, entry_char_spans,
                                      item_logits, token_spans)
from deciplane.errors import ConfigError, EmptyMenu
from deciplane.objectives.rlid import menu_log_softmax
from deciplane.types import Decision, Menu


def menu_logp(label_logits: torch.Tensor) -> torch.Tensor:
    """Log-probs over one menu's ``K`` label logits ``(K,)``: the objectives' menu softmax
    (:func:`deciplane.objectives.rlid.menu_log_softmax`) on a full menu."""
    k = label_logits.shape[-1]
    mask = torch.ones((1, k), dtype=torch.bool, device=label_logits.device)
    return menu_log_softmax(label_logits[None], mask)[0]                     # (K,)

MIN_SHARED_PREFIX = 16
"""Shorter shared prefixes are not worth a separate forward pass."""


class MenuAgent:
    """Chooses from ``info["menu"]`` by the softmax over single-token label logits.

    Arguments:
        policy: the :class:`~deciplane.agents.Policy` to score with.
        temperature: ``pi = softmax(label_logits / temperature)``.
        greedy: take the argmax instead of sampling.
        history: how many previous ``(observation, action)`` turns the prompt shows.
        max_menu: refuse menus larger than this (default: the alphabet size).
        system_prompt: the system message (instructions).
        labels: candidate label characters (default ``A..Z a..z``); each is checked to be
            one token after the answer cue.
        prefix_cache: reuse the KV cache of the token prefix shared by a batch.
        max_padding: split a batch into forwards of similar prompt length so that padding
            adds at most this fraction of compute (``float("inf")``: always one forward).
        dedup: compute identical prompts of a batch once.
        keep_boundary: keep the hidden states entering this decoder layer on every decision
            (``Decision.boundary_hidden``, ``(T, H)``) for a frozen-trunk update.
        readout: ``"labels"`` (RLiD: the next-token logits of the menu letters) or
            ``"items"`` (ours: each entry scored from the hidden states of its own tokens by
            the policy's :class:`~deciplane.agents.readout.ItemHead`, read from the same
            forward; add one with :meth:`Policy.add_item_head`).
        keep_readout: with ``readout="items"``, keep each decision's readout-layer states
            (``Decision.readout_hidden``); a trainer sets it when the head reads a frozen
            layer, so its update runs the head alone. With the items readout every forward
            stops at the head's layer (:attr:`early_exit`).
        block_cache: compute every prompt in fixed token blocks (the rows that need the same
            block index share a forward) and reuse the blocks met before (:mod:`deciplane.agents.prompt_cache`; share one cache
            between the agents of a process). Results are bitwise independent of what the
            cache holds; ``prefix_cache``, ``max_padding`` and ``dedup`` then do not apply
            (a repeated prompt is read whole from the cache). ``None``: the batched forward.

    ``update_logits``: when set (by a trainer, :func:`deciplane.engine.trunk.menu_update_logits`),
    :meth:`menu_log_probs` takes its last-position logits ``(B, V)`` from it instead of a
    full forward.
    """

    def __init__(self, policy: Policy, *, temperature: float = 1.0, greedy: bool = False, history: int = 2,
                 max_menu: int | None = None, system_prompt: str = MENU_SYSTEM_PROMPT,
                 labels: Sequence[str] = DEFAULT_LABELS, cue: str = MENU_CUE, prefix_cache: bool = True,
                 max_padding: float = 0.25, dedup: bool = True, keep_boundary: int | None = None,
                 readout: str = "labels", keep_readout: bool = False,
                 block_cache: BlockCache | None = None):
        if temperature <= 0:
            raise ConfigError(f"temperature must be > 0, got {temperature}; use greedy=True for argmax")
        if history < 0:
            raise ConfigError(f"history must be >= 0 turns, got {history}")
        self.policy = policy
        self.temperature = float(temperature)
        self.greedy = bool(greedy)
        self.history = int(history)
        self.system_prompt = system_prompt
        self.cue = cue
        self.prefix_cache = prefix_cache
        if max_padding < 0:
            raise ConfigError(f"max_padding must be >= 0 (a fraction of real tokens), got {max_padding}")
        self.max_padding = float(max_padding)
        context = policy.format_prompt("Current observation: a room.", system_prompt) + cue
        self.alphabet: LabelAlphabet = compile_alphabet(policy.tokenizer, context, labels)
        if max_menu is not None and max_menu < 1:
            raise ConfigError(f"max_menu must be >= 1, got {max_menu}")
        if max_menu is not None and max_menu > len(self.alphabet):
            raise ConfigError(
                f"max_menu={max_menu} but only {len(self.alphabet)} labels are single tokens for "
                f"{policy.name!r}; use max_menu <= {len(self.alphabet)} or pass more labels=[...]")
        self.max_menu = max_menu if max_menu is not None else len(self.alphabet)
        self.dedup = bool(dedup)
        if keep_boundary is not None:
            n_layers = len(decoder_layers(policy.model))
            if not 0 < keep_boundary < n_layers:
                raise ConfigError(f"keep_boundary={keep_boundary}: the boundary must be a decoder "
                                  f"layer in 1..{n_layers - 1}")
        self.keep_boundary = keep_boundary
        self.readout = check_readout(readout)
        self.head: ItemHead | None = None
        if self.readout == "items":
            self.head = getattr(policy.model, ITEM_HEAD_NAME, None)
            if self.head is None:
                raise ConfigError(f"readout='items' needs an item head on {policy.name!r}: call "
                                  "policy.add_item_head(layer=...) first (training configs: "
                                  "readout: items), or use readout='labels'")
        self.keep_readout = bool(keep_readout)
        self.block_cache = block_cache
        self.update_logits: Callable[[Sequence[Decision]], torch.Tensor] | None = None
        # counters of act() (the cost account of a decision, benchmarks/decision_cost.py)
        self.decisions = 0         # decisions made
        self.tokens_prompted = 0   # their prompt tokens
        self.tokens_computed = 0   # prompt tokens run through the model (not reused)
        self._prefix: tuple | None = None  # (key, ids tuple, [(k, v) per layer], boundary hidden)

    # ---- prompts -------------------------------------------------------------------------------
    def prompt(self, observation: str, menu: Menu, history: Sequence[tuple[str, str]] | None = None) -> str:
        """The full prompt text, ending with the answer cue."""
        return self._prompt_and_spans(observation, menu, history)[0]

    def _needs_no_forward(self) -> bool:
        """The items readout with a constant head (:meth:`ItemHead.is_constant`, e.g. right
        after initialisation) and nothing to keep: every logit is 0 whatever the model
        computes, so the forward is skipped (exactly the same decisions, no compute)."""
        return (self.head is not None and self.head.is_constant() and not self.keep_readout
                and self.keep_boundary is None)

    def _prompt_and_spans(self, observation: str, menu: Menu,
                          history: Sequence[tuple[str, str]] | None = None
                          ) -> tuple[str, list[tuple[int, int]]]:
        """The prompt and the character range of each menu action inside it."""
        if len(menu) == 0:
            raise EmptyMenu("the menu is empty: the agent needs at least one legal action; "
                            "check that the environment episode has not ended")
        self.alphabet.for_menu(len(menu), self.max_menu)
        shown = self.alphabet.shown[: len(menu)]
        text = menu_user_text(observation, shown, menu.actions, history, self.history)
        prompt = self.policy.format_prompt(text, self.system_prompt) + self.cue
        if self.readout == "labels":
            return prompt, []
        lines = menu_lines(shown, menu.actions)
        block = "\n".join(lines)
        where = prompt.rfind("Legal actions:\n" + block)
        if where < 0:
            raise ConfigError("the menu block was not found in the formatted prompt; the chat "
                              "template changed the user text")
        return prompt, entry_char_spans(prompt, where + len("Legal actions:\n"), lines, menu.actions)

    def _encode(self, observation: str, menu: Menu, history) -> tuple[torch.Tensor, tuple | None]:
        """Prompt ids ``(T,)`` and, for the items readout, each entry's token range."""
        prompt, spans = self._prompt_and_spans(observation, menu, history)
        if self.readout == "labels":
            return self.policy.tokenize(prompt), None
        ids, offsets = self.policy.tokenize_with_offsets(prompt)
        return ids, tuple(token_spans(offsets, spans))

    # ---- acting --------------------------------------------------------------------------------
    @torch.no_grad()
    def act(self, observations: Sequence[str], menus: Sequence[Menu],
            histories: Sequence[Sequence[tuple[str, str]]] | None = None, seed: int | None = None) -> list[Decision]:
        """One decision per environment, from one batched forward pass."""
        if len(observations) != len(menus):
            raise ConfigError(f"got {len(observations)} observations but {len(menus)} menus; pass one each")
        if histories is not None and len(histories) != len(observations):
            raise ConfigError(f"got {len(histories)} histories for {len(observations)} observations")
        if not observations:
            return []
        menus = [m if isinstance(m, Menu) else Menu(tuple(m)) for m in menus]
        hists = histories or [None] * len(observations)
        encoded = [self._encode(o, m, h) for o, m, h in zip(observations, menus, hists)]
        prompt_ids = [e[0] for e in encoded]
        self.decisions += len(prompt_ids)
        self.tokens_prompted += sum(int(p.numel()) for p in prompt_ids)
        if self._needs_no_forward():   # an untrained item head: uniform whatever it reads
            last, hidden = None, None
            states = [torch.zeros((int(p.numel()), self.head.hidden_size), device=self.policy.device)
                      for p in prompt_ids]                         # where the head's weights are
        else:
            last, hidden, states = self._last_logits(prompt_ids)              # (B, V)
        gen = torch.Generator().manual_seed(seed) if seed is not None else None
        decisions = []
        for i, menu in enumerate(menus):
            labels, ids = self.alphabet.for_menu(len(menu), self.max_menu)
            if self.readout == "items":
                z = item_logits(self.head, states[i], encoded[i][1]).float().cpu()   # (K,)
            else:
                z = last[i, ids].float().cpu()                                # (K,)
            logp = menu_logp(z / self.temperature)
            if self.greedy:
                k = int(torch.argmax(logp))
            else:
                k = int(torch.multinomial(logp.exp(), 1, generator=gen))
            decisions.append(Decision(menu=menu, labels=tuple(labels), label_token_ids=ids, label_logits=z,
                                      log_probs=logp, index=k, prompt_ids=prompt_ids[i], greedy=self.greedy,
                                      boundary_hidden=None if hidden is None else hidden[i],
                                      boundary_layer=None if hidden is None else self.keep_boundary,
                                      readout=self.readout, item_spans=encoded[i][1],
                                      readout_hidden=states[i] if self.keep_readout else None))
        return decisions

    def _last_logits(self, prompt_ids: list[torch.Tensor]
                     ) -> tuple[torch.Tensor, list[torch.Tensor] | None, list[torch.Tensor] | None]:
        """Next-token logits after each prompt, ``(B, V)``; with ``keep_boundary`` each
        prompt's hidden states entering that layer (``(T_i, H)`` each; else ``None``); with
        the items readout each prompt's states at the head's layer (else ``None``).

        With a ``block_cache``: in fixed blocks (:meth:`_block_rows`). Else
        identical prompts are computed once (``dedup``), the token prefix shared by the
        whole batch is run once (its KV cache is reused), and the remaining suffixes are
        grouped by length so that padding wastes at most ``max_padding`` of the compute (a
        padded token costs as much as a real one).
        """
        if self.block_cache is not None:
            return self._block_rows(prompt_ids)
        if self.dedup:
            first: dict[tuple[int, ...], int] = {}
            where = [first.setdefault(tuple(p.tolist()), len(first)) for p in prompt_ids]
            if len(first) < len(prompt_ids):
                unique = [prompt_ids[where.index(u)] for u in range(len(first))]
                logits, hidden, states = self._unique_last_logits(unique)
                return (logits[torch.tensor(where)],
                        None if hidden is None else [hidden[u] for u in where],
                        None if states is None else [states[u] for u in where])
        return self._unique_last_logits(prompt_ids)

    def _unique_last_logits(self, prompt_ids: list[torch.Tensor]
                            ) -> tuple[torch.Tensor, list[torch.Tensor] | None, list[torch.Tensor] | None]:
        model = self.policy.model
        was_training = model.training
        if was_training:
            model.eval()
        try:
            n = _common_prefix_len(prompt_ids)
            n = min(n, min(int(p.numel()) for p in prompt_ids) - 1)  # every row keeps >= 1 token
            if not self.prefix_cache or n < MIN_SHARED_PREFIX:
                n = 0
            suffixes = [p[n:] for p in prompt_ids]
            out: list = [None] * len(prompt_ids)
            hidden: list | None = None if self.keep_boundary is None else [None] * len(prompt_ids)
            states: list | None = None if self.head is None else [None] * len(prompt_ids)
            for chunk in length_buckets([int(x.numel()) for x in suffixes], self.max_padding):
                logits, h, r = self._forward_last([suffixes[i] for i in chunk], prompt_ids[0][:n])
                for row, i in enumerate(chunk):
                    out[i] = logits[row]
                    if hidden is not None:
                        hidden[i] = h[row]
                    if states is not None:
                        states[i] = r[row]
            self.tokens_computed += sum(int(x.numel()) for x in suffixes)
            return torch.stack(out), hidden, states                           # (B, V)
        finally:
            if was_training:
                model.train()

    # ---- in fixed blocks, reused across calls ------------------------------------------------
    def _block_rows(self, prompt_ids: list[torch.Tensor]
                    ) -> tuple[torch.Tensor | None, list[torch.Tensor] | None,
                               list[torch.Tensor] | None]:
        """:meth:`_last_logits` computed in the cache's fixed blocks: round ``j`` reads
        every row's block ``j`` from the cache or computes it over the keys/values of the
        row's blocks before it. The rows computed in one round share one forward: their
        pasts all hold ``j`` whole blocks and their blocks the same length, so no padding
        and no mask enter (a batch of equal rows gives each row the bits it gets alone:
        ``tests/agents/test_prompt_cache.py``); a block met twice in a round is computed
        once."""
        model = self.policy.model
        was_training = model.training
        if was_training:
            model.eval()
        try:
            rows = self._block_states(prompt_ids)
        finally:
            if was_training:
                model.train()
        last = None
        if not self.early_exit:   # the next-token logits from the final, normed state
            head = _base_model(model).get_output_embeddings()
            last = torch.cat([head(r["last"]) for r in rows]).float()            # (B, V)
        hidden = None if self.keep_boundary is None else [r["boundary"] for r in rows]
        states = None if self.head is None else [r["readout"] for r in rows]
        return last, hidden, states

    def _block_context(self) -> bytes:
        """What a block's result depends on besides its tokens (module doc of
        :mod:`deciplane.agents.prompt_cache`): the module, the parameters the forward reads
        (their version counters and storage), its depth, the kept states, the threads."""
        model = self.policy.model
        depth = self.head.layer if self.early_exit else None
        versions = []
        for name, p in model.named_parameters():
            if ITEM_HEAD_NAME in name:
                continue        # the head reads the kept states; it is not run here
            layer = _layer_index(name)
            if depth is not None and layer is not None and layer >= depth:
                continue        # above the early exit: never run
            versions.append((p._version, p.data_ptr()))
        key = (id(model), tuple(versions), depth, self.keep_boundary,
               None if self.head is None else self.head.layer, torch.get_num_threads())
        return repr(key).encode()

    def _block_states(self, prompt_ids: list[torch.Tensor]) -> list[dict[str, torch.Tensor]]:
        """Per prompt, its kept states over all its tokens (``readout``, ``boundary``:
        ``(T, H)``) and for a full-depth forward ``last`` ``(1, H)``, the final normed
        state of its last token."""
        cache = self.block_cache
        cache.stats.rows += len(prompt_ids)
        context = self._block_context()
        keys = [chain_keys(p, cache.block_tokens, context) for p in prompt_ids]
        bounds = [block_bounds(int(p.numel()), cache.block_tokens) for p in prompt_ids]
        blocks: list[list[Block | None]] = [[None] * len(k) for k in keys]
        pasts: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}   # row -> its KV so far
        for j in range(max(len(k) for k in keys)):
            todo: dict[bytes, list[int]] = {}
            for i, row_keys in enumerate(keys):
                if j >= len(row_keys):
                    continue
                block = cache.get(row_keys[j])
                if block is None:
                    todo.setdefault(row_keys[j], []).append(i)
                    continue
                blocks[i][j] = block
                cache.stats.blocks_reused += 1
                cache.stats.tokens_reused += bounds[i][j][1] - bounds[i][j][0]
                pasts.pop(i, None)    # rebuilt from the blocks if a later one is computed
            by_length: dict[int, list[bytes]] = {}
            for key, rows in todo.items():
                s, e = bounds[rows[0]][j]
                by_length.setdefault(e - s, []).append(key)
            for length, group in by_length.items():
                firsts = [todo[key][0] for key in group]
                start = bounds[firsts[0]][j][0]
                for i in firsts:
                    if i not in pasts:
                        pasts[i] = _concat_kv([b.kv for b in blocks[i][:j]])
                tokens = torch.stack([prompt_ids[i][start:start + length] for i in firsts])
                new, kv = self._compute_blocks(tokens, start, [pasts[i] for i in firsts])
                for key, i, block, row_kv in zip(group, firsts, new, kv):
                    cache.put(key, block)
                    cache.stats.blocks_computed += 1
                    cache.stats.tokens_computed += length
                    self.tokens_computed += length
                    for r in todo[key]:
                        blocks[r][j] = block
                        pasts[r] = row_kv
        out = []
        for row in blocks:
            names = [n for n in row[0].states if n != "last"]
            states = {n: torch.cat([b.states[n] for b in row]) for n in names}
            if "last" in row[-1].states:
                states["last"] = row[-1].states["last"]
            out.append(states)
        return out

    def _compute_blocks(self, tokens: torch.Tensor, start: int,
                        pasts: list[list[tuple[torch.Tensor, torch.Tensor]]]
                        ) -> tuple[list[Block], list[list[tuple[torch.Tensor, torch.Tensor]]]]:
        """One forward of the decoder (no output layer) over ``tokens`` ``(R, b)`` at
        positions ``start..start+b-1``, each row over its own past (``start`` tokens of
        keys/values per layer, or none): the rows' new :class:`Block` s and their pasts
        extended by them."""
        from transformers import DynamicCache

        policy, model = self.policy, self.policy.model
        decoder = _base_model(model).model
        n_rows, n = tokens.shape
        data = None
        if start:
            data = [(torch.cat([p[layer][0] for p in pasts]), torch.cat([p[layer][1] for p in pasts]))
                    for layer in range(len(pasts[0]))]
        cache = DynamicCache(ddp_cache_data=data, config=_base_config(model))
        pos = torch.arange(start, start + n).unsqueeze(0).expand(n_rows, -1)
        with self._capture() as cap, self._capture_readout() as rcap:
            out = decoder(input_ids=tokens.to(policy.device), position_ids=pos.to(policy.device),
                          use_cache=True, **{_cache_kwarg(decoder): cache})
        if self.block_cache is not None:
            self.block_cache.stats.forwards += 1
        layers = _cache_tensors(cache)
        blocks, kv = [], []
        for r in range(n_rows):   # copies: a view would keep the whole batch's tensor alive
            states = {}
            if rcap is not None:
                states["readout"] = rcap[-1][r].clone()                          # (b, H)
            if cap is not None:
                states["boundary"] = cap[-1][r].clone()                          # (b, H)
            if not self.early_exit:
                states["last"] = out.last_hidden_state[r, -1:].clone()           # (1, H)
            blocks.append(Block(kv=[(k[r:r + 1, :, start:].clone(), v[r:r + 1, :, start:].clone())
                                    for k, v in layers], states=states))
            kv.append([(k[r:r + 1], v[r:r + 1]) for k, v in layers])
        return blocks, kv

    def _forward_last(self, suffixes: list[torch.Tensor], prefix: torch.Tensor
                      ) -> tuple[torch.Tensor, list[torch.Tensor] | None, list[torch.Tensor] | None]:
        """Last-position logits of ``prefix + suffix`` for each suffix (one left-padded
        forward), and with ``keep_boundary`` (and the items readout) the unpadded boundary
        (and readout-layer) hidden states of ``prefix + suffix`` per row (the prefix's
        computed once, see :meth:`_prefix_cache`)."""
        policy, model = self.policy, self.policy.model
        ids, mask = left_pad(suffixes, policy.tokenizer.pad_token_id)
        n = int(prefix.numel())
        cache = self._prefix_cache(prefix, len(suffixes)) if n else None
        with self._capture() as cap, self._capture_readout() as rcap:
            if n == 0:
                out = model(input_ids=ids.to(policy.device), attention_mask=mask.to(policy.device),
                            position_ids=position_ids_from_mask(mask).to(policy.device),
                            use_cache=False, logits_to_keep=1)
            else:
                full_mask = torch.cat([torch.ones(len(suffixes), n, dtype=torch.long), mask], dim=1)
                pos = n + position_ids_from_mask(mask)
                out = model(input_ids=ids.to(policy.device), attention_mask=full_mask.to(policy.device),
                            position_ids=pos.to(policy.device), use_cache=True, logits_to_keep=1,
                            **{_cache_kwarg(model): cache})
        return (out.logits[:, -1, :], self._rows(cap, suffixes, 3 if n else None),
                self._rows(rcap, suffixes, 4 if n else None))

    def _rows(self, cap: list[torch.Tensor] | None, suffixes: list[torch.Tensor],
              prefix_slot: int | None) -> list[torch.Tensor] | None:
        """Unpadded per-row states ``(n + S_i, H)`` of the last captured forward, with the
        cached prefix's states (``self._prefix[prefix_slot]``) in front."""
        if cap is None:
            return None
        h = cap[-1]                                                           # (B, S, H)
        rows = []
        for row, s in enumerate(suffixes):
            own = h[row, h.shape[1] - int(s.numel()):]                        # (S_i, H)
            rows.append(torch.cat([self._prefix[prefix_slot], own]) if prefix_slot else own.clone())
        return rows

    def _capture(self):
        """While active, appends the input of decoder layer ``keep_boundary`` of every
        forward to the yielded list (``None`` without ``keep_boundary``)."""
        return capture_layer_input(self.policy.model, self.keep_boundary)

    def _capture_readout(self, detach: bool = True):
        """While active, appends the states at the item head's layer (``None`` for the
        labels readout). With :attr:`early_exit` the forward stops at that layer: the
        decoder runs only the layers below it and hands their output to the recorder."""
        if self.early_exit:
            return truncated_decoder(self.policy.model, self.head.layer, detach=detach)
        return capture_hidden(self.policy.model, None if self.head is None else self.head.layer,
                              detach=detach)

    @property
    def early_exit(self) -> bool:
        """Forwards stop at the item head's layer: with the items readout the menu's logits
        are the head's, so the layers above it compute nothing the policy uses (a kept
        frozen-trunk boundary must lie below the head's layer)."""
        if self.head is None:
            return False
        n = len(decoder_layers(self.policy.model))
        return self.head.layer < n and (self.keep_boundary is None
                                        or self.keep_boundary < self.head.layer)

    def _prefix_cache(self, prefix: torch.Tensor, batch: int):
        """A ``DynamicCache`` holding the prefix's keys/values, expanded to ``batch`` rows.

        The per-layer tensors (and, with ``keep_boundary``, the prefix's boundary hidden
        states ``(n, H)``) are computed once and kept while the prefix, the module, the
        boundary and every parameter's version counter (bumped by in-place optimizer steps)
        are unchanged.
        """
        from transformers import DynamicCache

        model = self.policy.model
        key = (id(model), tuple(p._version for p in model.parameters()), self.keep_boundary,
               None if self.head is None else self.head.layer, self.early_exit)
        ids = tuple(prefix.tolist())
        if self._prefix is None or self._prefix[0] != key or self._prefix[1] != ids:
            with self._capture() as cap, self._capture_readout() as rcap:
                out = model(input_ids=prefix.unsqueeze(0).to(self.policy.device), use_cache=True,
                            logits_to_keep=1)
            kv = _cache_tensors(getattr(out, "cache", None) or out.past_key_values)
            self._prefix = (key, ids, kv, None if cap is None else cap[-1][0],
                            None if rcap is None else rcap[-1][0])
            self.tokens_computed += len(ids)
        kv = self._prefix[2]
        return DynamicCache(ddp_cache_data=[(k.expand(batch, -1, -1, -1), v.expand(batch, -1, -1, -1)) for k, v in kv],
                            config=_base_config(model))

    # ---- training ----------------------------------------------------------------------------
    def menu_log_probs(self, decisions: Sequence[Decision], *, with_entropy: bool = False):
        """Current-policy log-probs ``(K_i,)`` over each decision's stored menu, WITH grad.

        Recomputed from the decision's exact ``prompt_ids`` and ``label_token_ids`` in one
        batched forward (left padded), at this agent's temperature. With
        ``with_entropy=True`` returns ``(log_probs, entropies)``.
        """
        if not decisions:
            return ([], []) if with_entropy else []
        if self.readout == "items":
            logps = self._item_log_probs(decisions)
        else:
            last = self._update_forward(decisions)                            # (B, V)
            logps = [menu_logp(last[i, d.label_token_ids.to(last.device)] / self.temperature)
                     for i, d in enumerate(decisions)]
        if not with_entropy:
            return logps
        return logps, [menu_entropy(lp) for lp in logps]

    def _update_forward(self, decisions: Sequence[Decision]) -> torch.Tensor:
        """Last-position logits ``(B, V)`` of the decisions' prompts, with grad: the
        trainer's frozen-trunk forward (``update_logits``) or one full left-padded forward."""
        if self.update_logits is not None:
            return self.update_logits(decisions).float()                      # (B, V)
        policy = self.policy
        ids, mask = left_pad([d.prompt_ids for d in decisions], policy.tokenizer.pad_token_id)
        out = policy.model(input_ids=ids.to(policy.device), attention_mask=mask.to(policy.device),
                           position_ids=position_ids_from_mask(mask).to(policy.device), use_cache=False,
                           logits_to_keep=1)
        return out.logits[:, -1, :].float()                                  # (B, V)

    def _item_log_probs(self, decisions: Sequence[Decision]) -> list[torch.Tensor]:
        """Items readout with grad: the head on the readout states kept by the rollout
        (a frozen layer: the head alone learns), else on the states of a forward with grad
        (the layers between the trainable boundary and the head's layer learn too)."""
        for i, d in enumerate(decisions):
            if d.readout != "items" or d.item_spans is None:
                raise ConfigError(f"decision {i} was made with readout={d.readout!r}; the items "
                                  "readout can only score decisions it made")
        if all(d.readout_hidden is not None for d in decisions):
            rows = [d.readout_hidden.to(self.policy.device) for d in decisions]
        else:
            with self._capture_readout(detach=False) as cap:
                self._update_forward(decisions)
            rows = rows_from_captures(cap, [int(d.prompt_ids.numel()) for d in decisions])
        return [menu_logp(item_logits(self.head, r, d.item_spans).float() / self.temperature)
                for r, d in zip(rows, decisions)]

    def menu_entropy(self, decisions: Sequence[Decision]) -> list[torch.Tensor]:
        """Entropy of the current policy over each stored menu (scalar tensors, with grad)."""
        return self.menu_log_probs(decisions, with_entropy=True)[1]


def menu_entropy(log_probs: torch.Tensor) -> torch.Tensor:
    """Entropy ``-sum p log p`` of a menu distribution given its log-probs ``(K,)``."""
    return -(log_probs.exp() * log_probs).sum(-1)


def rows_from_captures(caps: list[torch.Tensor], lengths: Sequence[int]) -> list[torch.Tensor]:
    """Per-row states ``(T_i, H)`` of one left-padded batch forward from what a hook
    captured: either one ``(B, T, H)`` tensor, or a shared prefix ``(1, n, H)`` run first
    and then the rows' suffixes ``(B, S, H)`` (the frozen-trunk update's shared prefix)."""
    if len(caps) == 1:
        return unpad_left(caps[0], lengths)
    if len(caps) == 2 and caps[0].shape[0] == 1:
        prefix, h = caps[0][0], caps[1]
        m = prefix.shape[0]
        return [torch.cat([prefix, h[i, h.shape[1] - (n - m):]]) for i, n in enumerate(lengths)]
    raise ConfigError(f"the readout layer was seen {len(caps)} times in one update forward; "
                      "an item head below the trainable layers needs keep_readout=True")


def length_buckets(lengths: Sequence[int], max_padding: float) -> list[list[int]]:
    """Group indices into batches of similar length: sorted by length, a batch grows while
    its padded size ``len(batch) * longest`` stays within ``(1 + max_padding)`` of its real
    tokens. ``max_padding=inf`` gives one batch. Example: ``[10, 11, 50]``, 0.15 ->
    ``[[0, 1], [2]]``."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    buckets: list[list[int]] = []
    real = 0
    for i in order:
        if buckets:
            cand = buckets[-1] + [i]
            if len(cand) * lengths[i] <= (1 + max_padding) * (real + lengths[i]):
                buckets[-1] = cand
                real += lengths[i]
                continue
        buckets.append([i])
        real = lengths[i]
    return buckets


def _common_prefix_len(seqs: Sequence[torch.Tensor]) -> int:
    """Length of the longest token prefix shared by all sequences."""
    first = seqs[0]
    n = min(int(s.numel()) for s in seqs)
    for s in seqs[1:]:
        neq = (s[:n] != first[:n]).nonzero()
        if len(neq):
            n = int(neq[0, 0])
    return n


def _cache_tensors(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per-layer ``(keys, values)`` of a transformers cache object."""
    if hasattr(cache, "layers"):   # layers a truncated forward never ran hold no keys
        return [(layer.keys, layer.values) for layer in cache.layers if layer.keys is not None]
    return [(k, v) for k, v in cache]  # legacy tuple-of-tuples


def _concat_kv(blocks_kv: list[list[tuple[torch.Tensor, torch.Tensor]]]
               ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer, the keys/values of consecutive blocks joined along the positions."""
    if not blocks_kv:
        return []
    return [(torch.cat([b[layer][0] for b in blocks_kv], dim=2),
             torch.cat([b[layer][1] for b in blocks_kv], dim=2)) for layer in range(len(blocks_kv[0]))]


def _base_model(model):
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _layer_index(name: str) -> int | None:
    """The decoder layer a parameter belongs to (``...layers.12.mlp...`` -> 12), else None."""
    m = _LAYER.search(name)
    return None if m is None else int(m.group(1))


_LAYER = re.compile(r"\.layers\.(\d+)\.")


def _cache_kwarg(model) -> str:
    """``"cache"`` on transformers versions that renamed ``past_key_values``, else the old name."""
    import inspect

    return ("cache" if "cache" in inspect.signature(_base_model(model).forward).parameters
            else "past_key_values")


def _base_config(model):
    return getattr(_base_model(model), "config", None)
