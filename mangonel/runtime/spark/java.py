"""Java 17+ is mangonel's one system requirement (Spark runs on the JVM). Checked before
Spark starts so a missing or old Java gives one clear message, not a Py4J stack trace."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

MINIMUM_JAVA = 17


def java_executable() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and os.path.exists(os.path.join(home, "bin", "java")):
        return os.path.join(home, "bin", "java")
    return shutil.which("java")


def java_major_version(executable: str) -> int | None:
    output = subprocess.run(
        [executable, "-version"], capture_output=True, text=True, timeout=60
    ).stderr
    match = re.search(r'version "(\d+)(?:\.(\d+))?', output)
    if not match:
        return None
    major = int(match.group(1))
    # Java 8 and older report "1.8.0_x".
    return int(match.group(2)) if major == 1 and match.group(2) else major


def check_java() -> str | None:
    """None when Java 17+ is found, else a message saying what to install."""
    executable = java_executable()
    if executable is None:
        return (
            "mangonel needs Java 17 or newer for Spark, and no `java` was found on PATH "
            "(nor in $JAVA_HOME). Install one, e.g. `apt-get install openjdk-17-jre-headless` "
            "or `brew install openjdk@17`, then retry."
        )
    major = java_major_version(executable)
    if major is None or major < MINIMUM_JAVA:
        return (
            f"mangonel needs Java {MINIMUM_JAVA} or newer for Spark; {executable} is "
            f"{'of unknown version' if major is None else f'Java {major}'}. Install Java 17+ "
            "and put it first on PATH or set JAVA_HOME."
        )
    return None


def main() -> int:
    problem = check_java()
    if problem:
        print(problem, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
