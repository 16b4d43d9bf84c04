"""Every fenced code block of README.md and docs/**/*.md runs, or says why it does not.

The convention (docs/contributing.md): an HTML comment on the last non-blank line before a
fence, ``<!-- docs-test: VERDICT key="value" ... -->``.

* no marker on a ``python`` block: it runs as it is; on ``yaml``/``toml``/``json``: parsed;
* ``run``: python in a fresh interpreter, bash under ``bash -euo pipefail``, in a temporary
  folder with links to configs/, examples/ and benchmarks/; options ``substitute="OLD->NEW;
  ..."`` (each OLD must occur in the block), ``prepend=``, ``append=``, ``timeout=``,
  ``needs="java,bwrap"`` (skipped with the reason when a system tool is missing, as the
  rest of the suite does);
* ``config base="configs/X.yaml"``: a YAML fragment merged into that config and loaded with
  ``deciplane.trainers.config.load_config``;
* ``skip reason="..."`` and ``output``: not run (reported as skipped);
* anything else — a bash block without a marker, an unknown verdict, a skip without a
  reason — fails.

One test per block, named ``FILE:LINE`` (the line of the opening fence).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = None

ROOT = Path(__file__).resolve().parent.parent
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINKED = ("configs", "examples", "benchmarks")
DEFAULT_TIMEOUT = 120

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)")
MARKER = re.compile(r"^\s*<!--\s*docs-test:\s*(?P<verdict>[\w-]+)(?P<args>.*?)-->\s*$")
ARG = re.compile(r"""(?P<key>\w+)=(?:"(?P<dq>(?:[^"\\]|\\.)*)"|'(?P<sq>[^']*)')""")
PYTHON = {"python", "py", "python3"}
SHELL = {"bash", "sh", "shell", "console"}
PREAMBLE = "import torch\ntorch.set_num_threads(1)\n"


@dataclass
class Block:
    path: Path
    line: int                      # 1-based line of the opening fence
    lang: str
    code: str
    verdict: str | None = None     # None: no marker
    args: dict[str, str] = field(default_factory=dict)
    marker_error: str = ""

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def parse_args(text: str) -> tuple[dict[str, str], str]:
    args, rest = {}, text
    for m in ARG.finditer(text):
        value = m.group("sq") if m.group("sq") is not None else \
            re.sub(r"\\(.)", r"\1", m.group("dq"))
        args[m.group("key")] = value
        rest = rest.replace(m.group(0), "", 1)
    return args, rest.strip()


def collect(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").split("\n")
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.group("indent"), m.group("fence"), m.group("lang").lower()
        close = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        body, j = [], i + 1
        while j < len(lines) and not close.match(lines[j]):
            ln = lines[j]
            body.append(ln[len(indent):] if ln.startswith(indent) else ln.lstrip())
            j += 1
        block = Block(path, i + 1, lang, "\n".join(body) + "\n")
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        marker = MARKER.match(lines[k]) if k >= 0 else None
        if marker:
            block.verdict = marker.group("verdict")
            block.args, leftover = parse_args(marker.group("args"))
            if leftover:
                block.marker_error = f"cannot read the marker's options: {leftover!r}"
        blocks.append(block)
        i = j + 1
    return blocks


BLOCKS = [b for f in DOC_FILES for b in collect(f)]


def substitute(block: Block, code: str) -> str:
    spec = block.args.get("substitute", "")
    for pair in filter(None, (p.strip() for p in spec.split(";"))):
        if "->" not in pair:
            pytest.fail(f"{block.id}: substitution {pair!r} has no '->'")
        old, new = pair.split("->", 1)
        if old not in code:
            pytest.fail(f"{block.id}: substitution {old!r} no longer occurs in the block; "
                        "update the block or its marker")
        code = code.replace(old, new)
    return code


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A fresh folder per block (run directories never clash), with the repository's
    configs/, examples/ and benchmarks/ linked in."""
    d = tmp_path
    for name in LINKED:
        (d / name).symlink_to(ROOT / name, target_is_directory=True)
    return d


def run_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    return env


def run(block: Block, argv: list[str], cwd: Path) -> None:
    timeout = float(block.args.get("timeout", DEFAULT_TIMEOUT))
    try:
        proc = subprocess.run(argv, cwd=cwd, env=run_env(), capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{block.id}: still running after {timeout:.0f} s (a `timeout` option, or "
                    f"a smaller substitution?)\n{(e.stdout or '')[-2000:]}")
    if proc.returncode != 0:
        pytest.fail(f"{block.id}: exit status {proc.returncode}\n--- stdout\n"
                    f"{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-5000:]}")


def check_config(block: Block) -> None:
    import yaml

    from deciplane.trainers.config import load_config

    base = block.args.get("base")
    if not base:
        pytest.fail(f'{block.id}: a config block needs base="configs/....yaml"')
    fragment = yaml.safe_load(block.code)
    if not isinstance(fragment, dict):
        pytest.fail(f"{block.id}: a config fragment must be a mapping")
    load_config(ROOT / base, data=fragment)


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_doc_block(block: Block, workdir: Path) -> None:
    if block.marker_error:
        pytest.fail(f"{block.id}: {block.marker_error}")
    verdict = block.verdict
    if verdict == "skip":
        reason = block.args.get("reason", "").strip()
        if not reason:
            pytest.fail(f'{block.id}: skip needs reason="why this block cannot run"')
        pytest.skip(f"not run: {reason}")
    if verdict == "output":
        pytest.skip("output / not a command")
    if verdict == "config":
        check_config(block)
        return
    if verdict not in (None, "run"):
        pytest.fail(f"{block.id}: unknown docs-test verdict {verdict!r} "
                    "(run, skip, output or config; docs/contributing.md)")
    if verdict is None:
        if block.lang in PYTHON:
            pass
        elif block.lang in ("yaml", "yml"):
            import yaml
            yaml.safe_load(block.code)
            return
        elif block.lang == "toml":
            if tomllib is None:
                pytest.skip("parsing TOML needs Python 3.11 (tomllib)")
            tomllib.loads(block.code)
            return
        elif block.lang == "json":
            json.loads(block.code)
            return
        else:
            pytest.fail(f"{block.id}: a {block.lang or 'plain'} block needs a marker: "
                        '<!-- docs-test: run | skip reason="..." | output --> on the line '
                        "before its fence (docs/contributing.md)")
    missing = [tool for tool in filter(None, block.args.get("needs", "").split(","))
               if shutil.which(tool.strip()) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (tools/system-deps.sh installs it)")
    code = substitute(block, block.code)
    pre, post = block.args.get("prepend", ""), block.args.get("append", "")
    if block.lang in PYTHON:
        script = workdir / f"block_{block.path.stem}_{block.line}.py"
        script.write_text(PREAMBLE + pre + "\n" + code + "\n" + post + "\n")
        run(block, [sys.executable, str(script)], workdir)
    elif block.lang in SHELL:
        run(block, ["bash", "-euo", "pipefail", "-c", pre + "\n" + code + "\n" + post], workdir)
    else:
        pytest.fail(f"{block.id}: `run` is for python and bash blocks, not {block.lang!r}")


def test_blocks_were_found() -> None:
    files = {b.path.name for b in BLOCKS}
    assert "README.md" in files and len(BLOCKS) > 20
