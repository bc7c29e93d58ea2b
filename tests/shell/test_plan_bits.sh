# The bits of training and evaluation, recorded: ./train for about 20 steps (lenet and resnet18,
# fp32 and bf16, one rank, fixed seed) and ./pipeline_eval's predictions of the resnet18 run,
# against tests/shell/plan_bits.expected. A change that should not change what a step computes
# (a refactor of how a step is planned, a kernel moved) must leave every line as it is; a change
# that means to change the numbers regenerates the file (UPDATE=1 bash tests/shell/test_plan_bits.sh)
# and says why in its commit. Each line: what ran, the SHA-256 of the final weights' tensor bytes
# (safetensors header without its metadata, then the data), and of the per-epoch losses and
# accuracies in metrics.jsonl (or of predictions.csv).
# Reproducible across the CPUs we test on: OpenBLAS held to its Haswell kernels (which every
# x86-64 CPU with AVX2 runs the same), 2 threads, and each kernel set named in the line's mode:
# - fp32, bf16-native, bf16-emulated: the direct convolution's AVX-512 kernels, bf16 once per
#   AVX-512 GEMM path the CPU has (native with AVX512-BF16, emulated on any AVX-512F CPU);
# - im2col-fp32, winograd-fp32, im2col-bf16: the other CPU implementations (conv_engine.h) forced
#   where they fit (MPICNN_CONV, MPICNN_CONV_BF16), on an AVX-512 CPU as fp32;
# - avx2-fp32, avx2-bf16-reference: the AVX2 kernels and the scalar bf16 GEMM, an AVX2-only
#   CPU's own choice, checked there (an AVX-512 CPU runs these kernels too, but the rest of a
#   -march=native build may vectorize otherwise there: its bits are not promised the same).
# The expected file gathers the lines recorded on each kind; UPDATE=1 re-records the lines this
# CPU runs and keeps the others.
source "$(dirname "$0")/lib/common.sh"
cd "$REPO"

expected=tests/shell/plan_bits.expected
export OPENBLAS_CORETYPE=Haswell
unset MPICNN_CONV MPICNN_CONV_ISA MPICNN_CONV_BF16 MPICNN_CONV_PARALLEL MPICNN_FUSION \
  MPICNN_CPU_PRECISION MPICNN_GEMM MPICNN_BF16

# can_run MODE: whether this CPU runs that mode's kernels.
can_run() {
  case "$1" in
    avx2-*) ! grep -qw avx512f /proc/cpuinfo ;;
    bf16-native) grep -qw avx512_bf16 /proc/cpuinfo ;;
    *) grep -qw avx512f /proc/cpuinfo ;;
  esac
}
# run_env MODE: the environment that selects the mode's kernels.
run_env() {
  case "$1" in
    avx2-fp32) echo MPICNN_CONV_ISA=avx2 ;;
    avx2-bf16-reference) echo MPICNN_CONV_ISA=avx2 MPICNN_BF16=reference ;;
    im2col-fp32) echo MPICNN_CONV=im2col ;;
    winograd-fp32) echo MPICNN_CONV=winograd ;;
    im2col-bf16) echo MPICNN_CONV_BF16=im2col ;;
    bf16-*) echo "MPICNN_BF16=${1#bf16-}" ;;
  esac
}
modes=""
for mode in fp32 bf16-native bf16-emulated im2col-fp32 winograd-fp32 im2col-bf16 avx2-fp32 \
  avx2-bf16-reference; do
  if can_run "$mode"; then modes="$modes $mode"; else
    skip "plan bits: $mode" "this CPU lacks its kernels (its lines are checked on a CPU that has them)"
  fi
done

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
# bf16's native and emulated kernels give the same bits layer by layer, but the planner keeps
# layers of few input channels on im2col on the emulated path (DirectConv::fits), so the two
# paths' runs differ and each has its own line.
for model in lenet resnet18; do
  size=32
  [ "$model" = resnet18 ] && size=40  # its smallest input is 33
  for mode in $modes; do
    run=$SCRATCH/$model-$mode
    precision=fp32
    case "$mode" in *bf16*) precision=bf16 ;; esac
    if ! env $(run_env "$mode") "$MPICNN_BUILD/bin/train" -m "$model" --dataset synthetic \
        --image-size "$size" -e 1 -b 52 --threads 2 -w 0 --seed 7 -lr 0.02 --precision "$precision" \
        --progress none -s "$run" > "$run.out" 2>&1; then
      fail "plan bits: $model $mode trains" "$(tail -1 "$run.out")"
      continue
    fi
    echo "train $model $mode weights $(digest "$run/latest/model.safetensors") metrics $(metrics "$run/metrics.jsonl")" >> "$got"
  done
done
for mode in $modes; do
  case "$mode" in *fp32) ;; *) continue ;; esac
  eval_out=$SCRATCH/eval-$mode
  if env $(run_env "$mode") "$MPICNN_BUILD/bin/pipeline_eval" --checkpoint "$SCRATCH/resnet18-$mode" \
      --threads 2 --batch-size 16 --sequential -o "$eval_out" > "$eval_out.out" 2>&1; then
    echo "pipeline_eval resnet18 $mode predictions $(sha256sum < "$eval_out/predictions.csv" | cut -d' ' -f1)" >> "$got"
  else
    fail "plan bits: pipeline_eval $mode runs" "$(tail -1 "$eval_out.out")"
  fi
done

key() { cut -d' ' -f1-3; }
if [ "${UPDATE:-0}" = 1 ]; then
  [ "$suite_failed" = 0 ] || finish  # a run failed: nothing recorded
  cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
  {
    grep '^#' "$expected" 2>/dev/null
    echo "# recorded by UPDATE=1 bash tests/shell/test_plan_bits.sh on $cpu, $(date -u +%F):$modes"
    # the other kinds' lines, then this CPU's, in the order they ran
    grep -v '^#' "$expected" 2>/dev/null | while read -r line; do
      grep -qF "$(echo "$line" | key) " "$got" || echo "$line"
    done
    cat "$got"
  } > "$SCRATCH/expected.new"
  mv "$SCRATCH/expected.new" "$expected"
  pass "plan bits: recorded $(wc -l < "$got") lines in $expected"
  finish
fi
while read -r what; do
  k=$(echo "$what" | key)
  want=$(grep -v '^#' "$expected" | grep -F "$k " | head -1)
  if [ -z "$want" ]; then
    fail "plan bits: $k" "no line in $expected (UPDATE=1 records it)"
  elif [ "$want" = "$what" ]; then
    pass "plan bits: $k the same bits as recorded"
  else
    fail "plan bits: $k" "other bits than recorded ($expected): got '$what', recorded '$want'"
  fi
done < "$got"
# Every recorded line this CPU can run ran.
while read -r what; do
  k=$(echo "$what" | key)
  can_run "$(echo "$k" | cut -d' ' -f3)" || continue
  grep -qF "$k " "$got" || fail "plan bits: $k" "recorded, but did not run here"
done < <(grep -v '^#' "$expected")
finish
