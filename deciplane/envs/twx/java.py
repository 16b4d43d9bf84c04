"""The Java runtime TextWorld-Express needs (its games run in a JVM reached through py4j)."""

from __future__ import annotations

import re
import shutil
import subprocess

from deciplane.errors import JavaUnavailable

MIN_JAVA = 8  # textworld-express.jar is compiled for Java 8 (class-file version 52)
TESTED_JAVA = 17  # what deciplane installs and tests with
INSTALL_HINT = ("install a Java 17 runtime: `sudo apt-get install -y openjdk-17-jre-headless` "
                "(Debian/Ubuntu; `make install` does it as root or with sudo), or put an "
                "existing JDK/JRE on PATH")


def parse_java_version(text: str) -> int | None:
    """The major version in ``java -version`` output (``"17.0.15"`` -> 17, ``"1.8.0_392"`` -> 8)."""
    m = re.search(r'version "(\d+)(?:\.(\d+))?', text)
    if not m:
        return None
    major = int(m.group(1))
    if major == 1 and m.group(2) is not None:  # the 1.x scheme of Java <= 8
        major = int(m.group(2))
    return major


def java_status() -> tuple[bool, str]:
    """``(ok, details)``: whether ``java`` on PATH runs and is recent enough for the jar
    (>= 8; deciplane installs and tests with 17)."""
    exe = shutil.which("java")
    if exe is None:
        return False, f"`java` is not on PATH; {INSTALL_HINT}"
    try:
        out = subprocess.run([exe, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"{exe} does not run ({exc}); {INSTALL_HINT}"
    text = (out.stderr or "") + (out.stdout or "")
    major = parse_java_version(text)
    first = text.strip().splitlines()[0] if text.strip() else "no output"
    if major is None:
        return False, f"{exe} printed no version ({first}); {INSTALL_HINT}"
    if major < MIN_JAVA:
        return False, (f"{exe} is Java {major} ({first}); TextWorld-Express needs "
                       f"{MIN_JAVA}+: {INSTALL_HINT}")
    if major < TESTED_JAVA:
        return True, f"{exe} ({first}; works, but deciplane is tested with Java {TESTED_JAVA})"
    return True, f"{exe} ({first})"


def require_java() -> None:
    """Raise :class:`~deciplane.errors.JavaUnavailable` (saying how to install it) unless a
    ``java`` is on PATH. Only presence is checked here (cheap); ``deciplane doctor`` also
    checks the version."""
    if shutil.which("java") is None:
        raise JavaUnavailable(f"deciplane/TextWorldExpress-v0 runs its games in a JVM but "
                              f"`java` is not on PATH; {INSTALL_HINT}")


__all__ = ["MIN_JAVA", "TESTED_JAVA", "parse_java_version", "java_status", "require_java"]
