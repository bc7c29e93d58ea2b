#!/usr/bin/env bash
# Summarises a parity log written with MPICNN_PARITY_LOG=FILE (lines "ENGINE CASE KEY ERROR
# TOLERANCE", see tests/model_parity.h): the largest float64 errors (tensors and updates) and
# the float32 quantity closest to its tolerance. How tests/README.md's table was made:
#   MPICNN_PARITY_LOG=/tmp/p.log build/release/tests/unit_tests -tc='*matches PyTorch*'
#   tests/parity_log_summary.sh /tmp/p.log
set -eu
log=${1:?usage: tests/parity_log_summary.sh LOG}
awk '
  $1 == "float64" && $3 !~ /^update\./ && $4 > t { t = $4; tk = $2 " " $3 }
  $1 == "float64" && $3 ~ /^update\./ && $4 > u { u = $4; uk = $2 " " $3 }
  $1 == "float32" && $5 > 0 && $4 / $5 > r { r = $4 / $5; rk = $2 " " $3 " (" $4 " / " $5 ")" }
  END {
    printf "float64 largest error: %.1e (%s)\n", t, tk
    printf "float64 largest update error: %.1e (%s)\n", u, uk
    printf "float32 largest error / tolerance: %.2f (%s)\n", r, rk
  }' "$log"
