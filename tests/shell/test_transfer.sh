# The transfer experiment (bench/transfer.sh) as a test: LeNet pretrained on Fashion-MNIST
# classes 0-4 and fine-tuned (--init-weights, every layer) on 100 images per class of classes
# 5-9 must beat training from scratch on them, with the same budget, on every seed and by a
# clear margin on average. Measured (bench/RESULTS.md): fine-tune 91.1%, scratch 87.2% over
# seeds 1-3, a lead of 3.8-4.0 points on each seed; the test asks for 2 on average, and for a
# lead on each seed. Also: the frozen-backbone runs train (well above the 20% of chance).
# Seeds 1 and 2 (the bench runs 3; the third took a quarter of the suite's time and added no
# failure mode): about 70 s on 2 cores beside another suite.
source "$(dirname "$0")/lib/common.sh"
cd "$REPO"

out=$SCRATCH/transfer
if ! MPICNN_BUILD=$MPICNN_BUILD SEEDS="1 2" bash bench/transfer.sh "$out" > "$SCRATCH/transfer.out" 2>&1; then
  fail "transfer: bench/transfer.sh runs" "$(tail -3 "$SCRATCH/transfer.out" | tr '\n' ' ')"
  finish
fi
verdict=$(/usr/bin/python3 - "$out/transfer.tsv" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
acc = {}
for r in rows:
    acc.setdefault(r["way"], {})[r["seed"]] = 100 * float(r["top1"])
ft, sc, fr = acc["finetune"], acc["scratch"], acc["frozen"]
lead = statistics.mean(ft.values()) - statistics.mean(sc.values())
worst = min(ft[s] - sc[s] for s in ft)
ok = len(ft) == 2 and lead >= 2.0 and worst > 0 and min(fr.values()) > 40
print(("ok" if ok else "bad") + f" fine-tune {statistics.mean(ft.values()):.2f}% vs scratch "
      f"{statistics.mean(sc.values()):.2f}% (lead {lead:.2f} points, smallest {worst:.2f}); "
      f"frozen {statistics.mean(fr.values()):.2f}%")
PY
)
case $verdict in
  ok*) pass "transfer: fine-tuning beats from-scratch on 100 images per class (${verdict#ok })" ;;
  *) fail "transfer: fine-tuning vs from-scratch" "${verdict#bad }" ;;
esac
finish
