"""CPU benchmark of DESIGN section 6 shapes with Spark's native window() as the peer.

    python benchmarks/bench_cpu.py [--quick] [--tuples N] [--no-peer] [--json out.json]

The same as `mangonel bench --backend cpu`; record results in docs/performance/cpu.md.
"""

import sys

from mangonel.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "--backend", "cpu", *sys.argv[1:]]))
