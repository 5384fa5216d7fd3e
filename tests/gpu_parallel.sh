#!/usr/bin/env bash
# The `-m gpu` tests in N pytest processes at once, their files (most tests first) dealt out
# back and forth: N files to processes 0..N-1, the next N to N-1..0, so the process that
# takes the largest file gets the smallest of the next round (dealt round-robin, the second
# process held sessions, sketches and the random expressions, and outran 480 s twice). One
# process each file's tests, its own numba cache dir. Serially, from cold caches, they do
# not fit one 10-minute command on the lent GPU machine (docs/testing.md).
# Usage: N=12 LIMIT=480 LOGS=$OUT bash tests/gpu_parallel.sh [pytest options, not paths]
# Prints each process's summary and every failure; exits 1 when any process failed.
set -u
N=${N:-8}
LOGS=${LOGS:-/tmp/gpu-tests}
mkdir -p "$LOGS"
python -m pytest --collect-only -q -m gpu -p no:cacheprovider --ignore=tests/spark "$@" \
  2>/dev/null | grep "::" | cut -d: -f1 | sort | uniq -c | sort -rn > "$LOGS/files.txt"
declare -a groups
i=0
while read -r _ file; do
  g=$((i % N))
  if [ $(((i / N) % 2)) -eq 1 ]; then g=$((N - 1 - g)); fi
  groups[$g]+=" $file"
  i=$((i + 1))
done < "$LOGS/files.txt"
for g in "${!groups[@]}"; do
  # shellcheck disable=SC2086  # one word per file
  NUMBA_CACHE_DIR=/tmp/numba-gpu-$g timeout "${LIMIT:-480}" python -m pytest -q -m gpu \
    -p no:cacheprovider "$@" ${groups[$g]} > "$LOGS/group$g.txt" 2>&1 &
done
failed=0
for job in $(jobs -p); do
  wait "$job" || failed=1
done
tail -n 1 "$LOGS"/group*.txt
grep -h -E "^(FAILED|ERROR)" "$LOGS"/group*.txt
exit $failed
