"""Find Java and check it is one PySpark 4 can use (17 or newer)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

REQUIRED = 17
INSTALL_HINT = (
    "PySpark 4 needs Java 17 or newer. Install it, e.g. on Debian/Ubuntu "
    "`sudo apt-get install openjdk-17-jre-headless`, on macOS `brew install openjdk@17`, "
    "then make sure `java -version` reports 17+ or set JAVA_HOME to its home directory."
)


class JavaError(RuntimeError):
    """Java is missing or too old for PySpark 4."""


def java_binary() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java")


def parse_major(version_output: str) -> int | None:
    """Major version from ``java -version`` output: '1.8.0_292' → 8, '17.0.15' → 17."""
    m = re.search(r'version "(\d+)(?:\.(\d+))?', version_output)
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major


def check_java() -> int:
    """The Java major version, or :class:`JavaError` saying exactly what to install."""
    binary = java_binary()
    if binary is None:
        raise JavaError("Java was not found (no JAVA_HOME, no `java` on PATH). " + INSTALL_HINT)
    try:
        out = subprocess.run([binary, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise JavaError(f"could not run {binary} -version ({e}). " + INSTALL_HINT) from None
    major = parse_major(out.stderr + out.stdout)
    if major is None:
        raise JavaError(f"could not read the version of {binary}. " + INSTALL_HINT)
    if major < REQUIRED:
        raise JavaError(f"{binary} is Java {major}. " + INSTALL_HINT)
    return major
