# The bits of training and evaluation, recorded: ./train for about 20 steps (lenet and resnet18,
# fp32 and bf16, one rank, fixed seed) and ./pipeline_eval's predictions of the resnet18 run,
# against tests/shell/plan_bits.expected. A change that should not change what a step computes
# (a refactor of how a step is planned, a kernel moved) must leave every line as it is; a change
# that means to change the numbers regenerates the file (UPDATE=1 bash tests/shell/test_plan_bits.sh)
# and says why in its commit. Each line: what ran, the SHA-256 of the final weights' tensor bytes
# (safetensors header without its metadata, then the data), and of the per-epoch losses and
# accuracies in metrics.jsonl (or of predictions.csv).
# Reproducible across the CPUs we test on: OpenBLAS held to its Haswell kernels (which every
# x86-64 CPU with AVX2 runs the same), 2 threads, the direct convolution's AVX-512 kernels (an
# AVX2-only CPU sums in another order: skipped there with that reason); bf16 once per kernel
# path the CPU has (native with AVX512-BF16, emulated on any AVX-512F CPU: see below).
source "$(dirname "$0")/lib/common.sh"
cd "$REPO"

expected=tests/shell/plan_bits.expected
if ! grep -qw avx512f /proc/cpuinfo; then
  skip "plan bits" "no AVX-512F on this CPU: the direct kernels' AVX2 set gives other bits than those recorded"
  finish
fi
export OPENBLAS_CORETYPE=Haswell
unset MPICNN_CONV MPICNN_CONV_ISA MPICNN_CONV_BF16 MPICNN_CONV_PARALLEL MPICNN_FUSION \
  MPICNN_CPU_PRECISION MPICNN_GEMM

# digest FILE: SHA-256 of a safetensors file's tensors (its header without __metadata__, then
# its data), so that what the header records about the run (times, paths) does not count.
digest() {
  /usr/bin/python3 - "$1" <<'PY'
import hashlib, json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
header.pop("__metadata__", None)
h = hashlib.sha256(json.dumps(header, sort_keys=True).encode())
h.update(raw[8 + n:])
print(h.hexdigest())
PY
}
# metrics FILE: SHA-256 of each epoch's losses and accuracies (not its times), as written.
metrics() {
  /usr/bin/python3 - "$1" <<'PY'
import hashlib, json, sys
keep = []
for line in open(sys.argv[1]):
    r = json.loads(line)
    keep.append({k: v for k, v in r.items() if "loss" in k or "acc" in k or k in ("epoch", "step")})
print(hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest())
PY
}

got=$SCRATCH/plan_bits.got
: > "$got"
# bf16 on each of its kernel paths this CPU runs: the native and emulated kernels give the same
# bits layer by layer, but the planner keeps layers of few input channels on im2col on the
# emulated path (DirectConv::fits), so the two paths' runs differ and each has its own line.
modes="fp32 bf16-emulated"
if grep -qw avx512_bf16 /proc/cpuinfo; then
  modes="fp32 bf16-native bf16-emulated"
else
  skip "plan bits: bf16-native" "no AVX512-BF16 on this CPU (its lines are checked where it is)"
fi
for model in lenet resnet18; do
  size=32
  [ "$model" = resnet18 ] && size=40  # its smallest input is 33
  for mode in $modes; do
    run=$SCRATCH/$model-$mode
    if ! MPICNN_BF16=${mode#bf16-} "$MPICNN_BUILD/bin/train" -m "$model" --dataset synthetic \
        --image-size "$size" -e 1 -b 52 --threads 2 -w 0 --seed 7 -lr 0.02 --precision "${mode%-*}" \
        --progress none -s "$run" > "$run.out" 2>&1; then
      fail "plan bits: $model $mode trains" "$(tail -1 "$run.out")"
      continue
    fi
    echo "train $model $mode weights $(digest "$run/latest/model.safetensors") metrics $(metrics "$run/metrics.jsonl")" >> "$got"
  done
done
eval_out=$SCRATCH/eval
if "$MPICNN_BUILD/bin/pipeline_eval" --checkpoint "$SCRATCH/resnet18-fp32" --threads 2 --batch-size 16 \
    --sequential -o "$eval_out" > "$eval_out.out" 2>&1; then
  echo "pipeline_eval resnet18 fp32 predictions $(sha256sum < "$eval_out/predictions.csv" | cut -d' ' -f1)" >> "$got"
else
  fail "plan bits: pipeline_eval runs" "$(tail -1 "$eval_out.out")"
fi

if [ "${UPDATE:-0}" = 1 ]; then
  [ "$suite_failed" = 0 ] || finish  # a run failed: nothing recorded
  { echo "# recorded by UPDATE=1 bash tests/shell/test_plan_bits.sh on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(date -u +%F)"
    cat "$got"; } > "$expected"
  pass "plan bits: recorded $(wc -l < "$got") lines in $expected"
  finish
fi
while read -r what; do
  key=$(echo "$what" | cut -d' ' -f1-3)
  want=$(grep -v '^#' "$expected" | grep -F "$key " | head -1)
  if [ -z "$want" ]; then
    fail "plan bits: $key" "no line in $expected (UPDATE=1 records it)"
  elif [ "$want" = "$what" ]; then
    pass "plan bits: $key the same bits as recorded"
  else
    fail "plan bits: $key" "other bits than recorded ($(head -1 "$expected" | sed 's/^# //')): got '$what', recorded '$want'"
  fi
done < "$got"
# Every recorded line this CPU can run ran (bf16-native lines need AVX512-BF16).
while read -r what; do
  key=$(echo "$what" | cut -d' ' -f1-3)
  case "$key" in *bf16-native) grep -qw avx512_bf16 /proc/cpuinfo || continue ;; esac
  grep -qF "$key " "$got" || fail "plan bits: $key" "recorded, but did not run here"
done < <(grep -v '^#' "$expected")
finish
