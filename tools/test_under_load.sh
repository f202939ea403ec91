#!/usr/bin/env bash
# `make test` RUNS times in a row (default 5) while busy loops keep every core loaded,
# as on a shared CI machine. Stops at the first failing run; the busy loops always end.
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-5}"
busy=()
cleanup() { kill "${busy[@]}" 2>/dev/null || true; }
trap cleanup EXIT
for _ in $(seq "$(nproc)"); do
  (while :; do :; done) &
  busy+=("$!")
done
for run in $(seq "$runs"); do
  started=$SECONDS
  echo "== make test under load: run $run of $runs"
  make test
  echo "== run $run passed in $((SECONDS - started)) s"
done
