"""The docs site builds strictly, the README stays short and its links resolve.

(a) ``mkdocs build --strict`` (the `make docs` build) into a temporary folder: a broken
link, a missing anchor, a page left out of the nav or a docstring the API reference cannot
render fails it; (b) README.md is at most 250 lines; (c) README.md's relative links point
at files that exist and, into docs/, at anchors the built site has.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
API_PACKAGES = ["deciplane", "envs", "agents", "trainers", "adapt", "methods", "objectives",
                "evaluation", "engine", "interop"]
LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


def _mkdocs_missing() -> str:
    for module in ("mkdocs", "material", "mkdocstrings_handlers.python"):
        try:
            if importlib.util.find_spec(module) is None:
                return module
        except ModuleNotFoundError:
            return module
    return ""


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    missing = _mkdocs_missing()
    if missing:
        pytest.skip(f"{missing} is not installed: pip install -e '.[docs]' (part of the dev "
                    "extra, so `make install` and CI have it)")
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(out), "--config-file", str(ROOT / "mkdocs.yml")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    return out


def test_strict_build(site: Path) -> None:
    assert (site / "index.html").is_file()
    assert (site / "results" / "index.html").is_file()
    for pkg in API_PACKAGES:
        page = site / "api" / pkg / "index.html"
        assert page.is_file(), f"no API page for {pkg}"
        assert "doc-heading" in page.read_text(encoding="utf-8"), f"API page {pkg} is empty"


def test_readme_is_short() -> None:
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= 250, f"README.md has {n} lines; at most 250 (the rest belongs in docs/)"


def test_readme_links_resolve(site: Path) -> None:
    text = README.read_text(encoding="utf-8")
    bad = []
    for m in LINK.finditer(text):
        target = m.group("target")
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        path, _, anchor = target.partition("#")
        if "shared" in Path(path).parts:
            bad.append(f"{target}: users do not have shared/")
            continue
        if not (ROOT / path).exists():
            bad.append(f"{target}: no such file")
            continue
        if anchor and path.startswith("docs/") and path.endswith(".md"):
            page = site / Path(path[len("docs/"):-len(".md")])
            html = (page / "index.html" if page.name != "index" else site / "index.html")
            if f'id="{anchor}"' not in html.read_text(encoding="utf-8"):
                bad.append(f"{target}: no anchor #{anchor} in the built page")
    assert not bad, "README.md links:\n" + "\n".join(bad)


def test_every_page_links_to_the_results() -> None:
    """Measured numbers live in docs/results.md; every other guide page points there."""
    missing = [p.name for p in sorted((ROOT / "docs").glob("*.md"))
               if p.name not in ("results.md",) and "results.md" not in p.read_text(encoding="utf-8")]
    assert not missing, f"pages without a link to results.md: {missing}"
