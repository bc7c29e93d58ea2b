#!/usr/bin/env bash
# Runs one libFuzzer harness of tests/fuzz/ with its settings: the input size limit that suits
# its format, its dictionary, its seed corpus (read only) and a working corpus that grows.
# Usage: tests/fuzz/run.sh NAME SECONDS WORK_DIR [more libFuzzer flags]
#   NAME      a harness: fuzz_NAME.cpp (build/fuzz/fuzz_NAME, made by `make fuzz-build`)
#   SECONDS   how long to fuzz (-max_total_time)
#   WORK_DIR  gets corpus/NAME (new inputs) and artifacts/NAME/ (crashes, timeouts, leaks)
# FUZZ_BIN_DIR overrides build/fuzz. Exits with libFuzzer's status: 0 when nothing was found.
set -u
name=${1:?usage: tests/fuzz/run.sh NAME SECONDS WORK_DIR [libFuzzer flags]}
seconds=${2:?seconds}
work=${3:?work dir}
shift 3
here=$(cd "$(dirname "$0")" && pwd)
bin=${FUZZ_BIN_DIR:-$here/../../build/fuzz}/fuzz_$name
# Enough for a few records or tensors of each format; fuzzing works best on small inputs.
case $name in
  image) max_len=32768 ;;
  idx | cifar) max_len=16384 ;;
  safetensors | trainer_json) max_len=8192 ;;
  *) max_len=4096 ;;
esac
dict=()
[ -f "$here/$name.dict" ] && dict=("-dict=$here/$name.dict")
mkdir -p "$work/corpus/$name" "$work/artifacts/$name"
# -timeout: one input taking 10 s is a hang; -rss_limit_mb (also the malloc limit): an input
# that makes the parser allocate 2 GB is an unbounded allocation.
exec "$bin" "${dict[@]}" -max_len=$max_len -timeout=10 -rss_limit_mb=2048 -max_total_time="$seconds" \
  -print_final_stats=1 -artifact_prefix="$work/artifacts/$name/" "$@" \
  "$work/corpus/$name" "$here/corpus/$name"
