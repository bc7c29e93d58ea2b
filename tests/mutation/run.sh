#!/usr/bin/env bash
# Mutation check: proves the PyTorch parity tests still bite. Builds the engine once per
# deliberate bug of src/core/mutant.h (make MUTANT=N, its own build folder) and runs the parity
# tests on it; every mutant must make them fail, and the unmutated build must pass them. Prints
# one table row per mutant with the test cases (and, for the model parity test, the engine:
# float64 and/or float32) that caught it. Not part of `make test`: 8 builds and parity runs take
# about 8 minutes on 2 cores.
#
# Usage: tests/mutation/run.sh [--full] [N ...]
#   N ...   mutants to run (default: all)
#   --full  every model of the parity test (default: lenet, resnet20, resnet18 and the
#           AdamW, 1-channel and Nesterov cases, which exercise every mutated line)
set -u
cd "$(dirname "$0")/../.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

names=("unmutated"
  "conv1.weight gradient scaled by 1.001"
  "BatchNorm bias gradient dropped"
  "running variance biased instead of unbiased"
  "AdamW bias correction off"
  "weight decay on BatchNorm parameters and biases that exclude it"
  "Nesterov step d + m*buf computed as buf + m*d"
  "max-pool ties go to the last maximum instead of the first"
  "identity residual add missing from ResNet block backward")

full=0
mutants=()
for a in "$@"; do
  case $a in
    --full) full=1 ;;
    [1-9]*) mutants+=("$a") ;;
    *) echo "usage: tests/mutation/run.sh [--full] [N ...]" >&2; exit 2 ;;
  esac
done
[ ${#mutants[@]} -gt 0 ] || mutants=(1 2 3 4 5 6 7 8)

tests='*matches PyTorch*,*torch.optim.SGD and AdamW*,*follows PyTorch on ties*'
subcases=()
[ $full = 1 ] || subcases=(-sc='lenet,resnet20,resnet18')
jobs=$(nproc)

# Runs the parity tests of build folder $1; prints "caught by" for what failed, "-" for nothing.
run_parity() {
  local log
  log=$(mktemp)
  "$1/tests/unit_tests" -tc="$tests" "${subcases[@]}" --no-colors=true >"$log" 2>&1
  local rc=$?
  if [ $rc = 0 ]; then
    echo "-"
  else
    # "TEST CASE:  name" heads each block of output (failures, and MESSAGEs too): the blocks
    # with an ERROR are the failures. The model parity messages name the engine.
    local cases engines
    cases=$(awk '/^=====+$/ { if (err && tc != "") print tc; tc = ""; err = 0; next }
                 /^TEST CASE:  / { tc = substr($0, 13) }
                 /ERROR:/ { err = 1 }
                 END { if (err && tc != "") print tc }' "$log" | sort -u | sed -E \
      -e 's/^every registry model structure matches PyTorch.*/model parity (registry)/' \
      -e 's/^resnet18 with AdamW.*/model parity (AdamW)/' \
      -e 's/^resnet18 with one input channel.*/model parity (1 channel)/' \
      -e 's/^resnet20 with Nesterov.*/model parity (Nesterov)/' \
      -e 's/^optimizers match torch.optim.*/torch.optim step by step/' \
      -e 's/^MaxPool2d follows PyTorch on ties.*/max-pool ties/' | paste -sd ';' - | sed 's/;/; /g')
    engines=$(grep -oE '(float64|float32) engine' "$log" | sort -u | paste -sd ',' -)
    echo "${cases:-crashed (exit $rc)}${engines:+ [$engines]}"
  fi
  rm -f "$log"
}

echo "building the unmutated engine"
make --no-print-directory -j"$jobs" tests >/dev/null 2>&1 || { echo "FAIL: the engine does not build"; exit 1; }
base=build/release
result=$(run_parity "$base")
if [ "$result" != "-" ]; then
  echo "FAIL: the unmutated build fails the parity tests: $result"
  exit 1
fi

printf '%-3s | %-62s | %s\n' "N" "mutant" "caught by"
missed=0
for n in "${mutants[@]}"; do
  dir=build/release-mutant$n
  # Start from the unmutated objects; only the files with a MUTANT() switch are recompiled.
  rm -rf "$dir" && cp -a "$base" "$dir"
  for f in $(grep -rl 'MUTANT(' src --include='*.cpp'); do
    rm -f "$dir/obj/${f%.cpp}.o" "$dir/obj-f64/${f%.cpp}.o"
  done
  if ! make --no-print-directory -j"$jobs" MUTANT="$n" tests >/dev/null 2>&1; then
    echo "FAIL: mutant $n does not build"
    missed=$((missed + 1))
    continue
  fi
  result=$(run_parity "$dir")
  printf '%-3s | %-62s | %s\n' "$n" "${names[$n]}" "$( [ "$result" = "-" ] && echo "NOT CAUGHT" || echo "$result")"
  [ "$result" = "-" ] && missed=$((missed + 1))
  rm -rf "$dir"
done
echo "$(( ${#mutants[@]} - missed )) of ${#mutants[@]} mutants caught"
[ $missed = 0 ]
