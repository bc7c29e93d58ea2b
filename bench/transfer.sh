#!/usr/bin/env bash
# The transfer experiment: does a pretrained backbone help on a small dataset of new classes?
# 1. pretrain MODEL on Fashion-MNIST classes 0-4 (PRE_SIZE training images, PRE_EPOCHS epochs);
# 2. for each seed, draw PER_CLASS training images of each of classes 5-9 (create_dataset
#    --classes 5-9 --seed S) and train on them for EPOCHS epochs three ways, the same budget:
#    frozen   --init-weights PRE --freeze-backbone (only the new 5-class head trains)
#    finetune --init-weights PRE (every layer trains, from the pretrained weights)
#    scratch  from random weights;
# 3. report the test accuracy on all 5000 test images of classes 5-9.
# Writes OUT/transfer.tsv (seed, way, top1) and prints a markdown table (per seed and mean).
#
# Usage: bench/transfer.sh [OUT]   (default OUT: a new folder under /tmp)
# Environment: MODEL (lenet), PRE_SIZE (10000), PRE_EPOCHS (5), PER_CLASS (100), EPOCHS (10),
#   SEEDS ("1 2 3"), RANKS (1), PRE_FLAGS (./train flags of the pretraining, "-lr 0.02"),
#   TRAIN_FLAGS (of the three small-set runs, "-lr 0.02"). LeNet at the default -lr 0.05 can
#   stall at chance (loss ln 5) on the 5-class pretraining; 0.02 did not in any run here.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-lenet} PRE_SIZE=${PRE_SIZE:-10000} PRE_EPOCHS=${PRE_EPOCHS:-5}
PER_CLASS=${PER_CLASS:-100} EPOCHS=${EPOCHS:-10} SEEDS=${SEEDS:-1 2 3} RANKS=${RANKS:-1}
PRE_FLAGS=${PRE_FLAGS:--lr 0.02} TRAIN_FLAGS=${TRAIN_FLAGS:--lr 0.02}
BUILD=${MPICNN_BUILD:-build/release}
out=${1:-$(mktemp -d /tmp/mpicnn-transfer.XXXXXX)}
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

create() { "$BUILD/bin/create_dataset" -d fashion-mnist --force "$@" >/dev/null; }
# train RUN_DIR FLAGS...: one quiet run; its test top-1 from summary.json on stdout.
train() {
  local run=$1
  shift
  mpiexec -n "$RANKS" --oversubscribe "$BUILD/bin/train" -m "$MODEL" --val-split 0 --progress none \
    -s "$run" "$@" >"$run.log" 2>&1 || { tail -3 "$run.log" >&2; return 1; }
  /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["test_top1"])' "$run/summary.json"
}

create --classes 0-4 --size "$PRE_SIZE" --test-fraction 0 -o "$out/data_pre"
create --split test --classes 5-9 --test-fraction 1 -o "$out/data_test"
rm -rf "$out/pre"
# shellcheck disable=SC2086  # PRE_FLAGS and TRAIN_FLAGS are lists of flags
train "$out/pre" -d "$out/data_pre/train.csv" --eval-every 0 --epochs "$PRE_EPOCHS" $PRE_FLAGS >/dev/null
echo "pretrained $MODEL on classes 0-4: $PRE_SIZE images, $PRE_EPOCHS epochs ($out/pre)" >&2

printf 'seed\tway\ttop1\n' >"$out/transfer.tsv"
for seed in $SEEDS; do
  small="$out/data_small_$seed"
  create --classes 5-9 --size $((5 * PER_CLASS)) --test-fraction 0 --seed "$seed" -o "$small"
  for way in frozen finetune scratch; do
    case $way in
      frozen) flags=(--init-weights "$out/pre" --freeze-backbone) ;;
      finetune) flags=(--init-weights "$out/pre") ;;
      scratch) flags=() ;;
    esac
    run="$out/${way}_$seed"
    rm -rf "$run"
    top1=$(train "$run" -d "$small/train.csv" --test-data "$out/data_test/test.csv" \
      --epochs "$EPOCHS" --seed "$seed" $TRAIN_FLAGS "${flags[@]}")
    printf '%s\t%s\t%s\n' "$seed" "$way" "$top1" >>"$out/transfer.tsv"
  done
done

/usr/bin/python3 - "$out/transfer.tsv" "$MODEL" "$PER_CLASS" "$EPOCHS" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
ways = ["frozen", "finetune", "scratch"]
seeds = sorted({r["seed"] for r in rows}, key=int)
acc = {(r["seed"], r["way"]): float(r["top1"]) for r in rows}
print(f"{sys.argv[2]}, {sys.argv[3]} images per class of Fashion-MNIST 5-9, {sys.argv[4]} epochs; "
      "test top-1 on the 5000 test images of 5-9")
print()
print("| seed | " + " | ".join(ways) + " |")
print("|---|" + "---|" * len(ways))
for s in seeds:
    print(f"| {s} | " + " | ".join(f"{100 * acc[(s, w)]:.2f}%" for w in ways) + " |")
print("| mean | " + " | ".join(f"{100 * statistics.mean(acc[(s, w)] for s in seeds):.2f}%" for w in ways) + " |")
EOF
