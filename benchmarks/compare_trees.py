"""Two source trees' benchmarks side by side, in one run on one machine.

    python benchmarks/compare_trees.py --old REF [--new DIR] [--rounds 2] cpu [bench args...]
    python benchmarks/compare_trees.py --old-tree DIR [--new DIR] gpu [tuples [budget_s [slides]]]
    python benchmarks/compare_trees.py --old REF bench [mangonel bench args...]

The old tree is exported with `git archive REF` (or given as a folder, e.g. one unpacked from
such an archive on a machine without git history); the new tree is this checkout. Each round
runs the old tree's benchmark, then the new tree's (`benchmarks/bench_cpu.py --no-peer --json`
or `benchmarks/bench_gpu.py`, or `bench`: `mangonel bench --json` with the arguments given,
e.g. the public GPU path on a config of shapes at an event rate, `bench --backend gpu --rate
40000000 --tuples 40000000 --no-peer /abs/path/shapes.json` (the config's path absolute: each
run has its own working directory), each from its own tree, in a fresh process, so neither
imports the other's modules), and the table gives every shape's best tuples/s of each tree
over the rounds and new / old. Alternating rounds put the machine's drift on both sides.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def export(ref: str, target: Path) -> Path:
    """`git archive REF` of this repository unpacked into target/old."""
    archive = target / "old.tar"
    with open(archive, "wb") as out:
        subprocess.run(["git", "-C", str(HERE), "archive", ref], stdout=out, check=True)
    tree = target / "old"
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    return tree


def run_tree(tree: Path, backend: str, arguments: list[str], workdir: Path) -> list[dict]:
    """One benchmark run of `tree` in its own process and working directory; its JSON rows."""
    workdir.mkdir(parents=True, exist_ok=True)
    # The tree first, so its `mangonel` wins; then what the caller put there (e.g. a
    # --target install of sqlglot on a machine without a virtual environment).
    inherited = os.environ.get("PYTHONPATH")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(tree), inherited])))
    if backend == "cpu":
        output = workdir / "bench.json"
        command = [
            sys.executable,
            str(tree / "benchmarks" / "bench_cpu.py"),
            "--no-peer",
            "--json",
            str(output),
            *arguments,
        ]
    elif backend == "bench":
        output = workdir / "bench.json"
        command = [
            sys.executable,
            "-c",
            "from mangonel.cli import main; main()",
            "bench",
            "--json",
            str(output),
            *arguments,
        ]
    else:
        output = workdir / "bench_gpu.json"  # bench_gpu.py writes it in its working directory
        command = [sys.executable, str(tree / "benchmarks" / "bench_gpu.py"), *arguments]
    print(f"$ ({tree.name}) {' '.join(command[1:])}", flush=True)
    subprocess.run(command, cwd=workdir, env=env, check=True)
    return json.loads(output.read_text())


def table(rounds: list[dict[str, list[dict]]]) -> str:
    """Markdown rows: shape, best old, best new (M tuples/s), new / old, rows out equal."""
    best: dict[str, dict[str, float]] = {}
    rows_out: dict[str, dict[str, set[int]]] = {}
    order: list[str] = []
    for one in rounds:
        for side, rows in one.items():
            for row in rows:
                shape = row["shape"]
                if shape not in order:
                    order.append(shape)
                rate = best.setdefault(shape, {}).get(side, 0.0)
                best[shape][side] = max(rate, row["tuples_per_second"])
                rows_out.setdefault(shape, {}).setdefault(side, set()).add(row["rows_out"])
    lines = [
        "| shape | old M/s | new M/s | new / old | rows out equal |",
        "|---|---|---|---|---|",
    ]
    for shape in order:
        old, new = best[shape].get("old"), best[shape].get("new")
        ratio = f"{new / old:.2f}" if old and new else ""
        equal = len(rows_out[shape].get("old", set()) | rows_out[shape].get("new", set())) == 1
        lines.append(
            f"| {shape} | {old / 1e6 if old else 0:.2f} | {new / 1e6 if new else 0:.2f} | "
            f"{ratio} | {'yes' if equal else 'NO'} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--old", help="git ref of the old tree (exported with git archive)")
    source.add_argument("--old-tree", type=Path, help="folder of the old tree")
    parser.add_argument("--new", type=Path, default=HERE, help="the new tree (this checkout)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, help="also write every round's rows as JSON here")
    parser.add_argument("backend", choices=("cpu", "gpu", "bench"))
    parser.add_argument("arguments", nargs=argparse.REMAINDER, help="passed to the benchmark")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mangonel-compare-") as scratch:
        work = Path(scratch)
        old = options.old_tree.resolve() if options.old_tree else export(options.old, work)
        rounds = []
        for number in range(options.rounds):
            rounds.append(
                {
                    side: run_tree(
                        tree, options.backend, options.arguments, work / f"{side}{number}"
                    )
                    for side, tree in (("old", old), ("new", options.new.resolve()))
                }
            )
        print(table(rounds))
        if options.out:
            options.out.write_text(json.dumps(rounds, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
