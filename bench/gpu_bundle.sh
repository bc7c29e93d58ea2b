#!/usr/bin/env bash
# Takes the CUDA build to a bare GPU machine (the `device` tool's): its copy of the working tree
# is limited to 64 MiB (the CUDA build with debug info is about 80 MB), and it has the CUDA 13
# runtime and PyTorch's cuDNN/cuBLAS wheels but not this project's other libraries (OpenMPI,
# OpenBLAS, Boost). So the binaries travel stripped, with the Debian packages they need.
#
#   bench/gpu_bundle.sh pack          here: makes the CUDA build for any x86-64-v3 (AVX2) CPU
#                                     (make CPU_ARCH=x86-64-v3 cuda-build: that machine's CPU
#                                     may lack this one's AVX-512) and writes
#                                     .gpu/bundle.tar.xz (about 15 MB)
#   bench/gpu_bundle.sh run CMD       there, with .gpu carried: unpacks the binaries into
#                                     build/release/cuda and the packages into .gpu/root, finds
#                                     cuDNN and cuBLAS, and runs the shell command CMD with them
#                                     and a relocated OpenMPI (mpiexec on PATH)
#
# One device call for the GPU checks of issue 7:
#   bash bench/gpu_bundle.sh run 'build/release/cuda/tests/unit_tests -ts=cuda;
#     mpiexec -n 2 build/release/cuda/tests/mpi_tests -ts=cuda; bench/gpu_train.sh'
set -euo pipefail
cd "$(dirname "$0")/.."
build=build/release/cuda
bins=(bin/train bin/pipeline_eval tests/unit_tests tests/mpi_tests bench/train_bench
      bench/conv_gpu_bench)
# Runtime libraries of the binaries and of mpiexec that a machine without Debian's packages
# lacks (CUDA's come from the machine).
packages=(libopenblas0-openmp libgfortran5 libboost-program-options1.74.0 libopenmpi3
          openmpi-bin openmpi-common libhwloc15 libevent-core-2.1-7 libevent-pthreads-2.1-7
          libpmix2 libjpeg62-turbo libxgboost0 libdmlc0 libtinyxml2-9)

pack() {
  local stage=.gpu/stage portable=build/release-x86-64-v3/cuda
  make --no-print-directory -j"$(nproc)" CPU_ARCH=x86-64-v3 cuda-build >/dev/null
  rm -rf "$stage" && mkdir -p "$stage/debs"
  for b in "${bins[@]}"; do  # unpacked there as $build, where the commands expect them
    mkdir -p "$stage/$build/$(dirname "$b")"
    strip -o "$stage/$build/$b" "$portable/$b"
  done
  (cd "$stage/debs" && apt-get download "${packages[@]}" >/dev/null 2>&1) ||
    { echo "gpu_bundle.sh: apt-get download ${packages[*]} failed" >&2; exit 1; }
  tar -cJf .gpu/bundle.tar.xz -C "$stage" .
  rm -rf "$stage"
  echo "gpu_bundle.sh: .gpu/bundle.tar.xz ($(du -h .gpu/bundle.tar.xz | cut -f1)); carry .gpu"
}

# The folder holding `name` among the machine's CUDA libraries and Python's nvidia wheels.
lib_dir() {
  local name=$1 d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu; do
    [ -e "$d/$name" ] && { echo "$d"; return; }
  done
  local site
  site=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null || true)
  for d in $site; do
    local f
    f=$(find "$d/nvidia" -name "$name" -print -quit 2>/dev/null || true)
    [ -n "$f" ] && { dirname "$f"; return; }
  done
  echo "gpu_bundle.sh: $name not found on this machine" >&2
  return 1
}

run() {
  [ -f .gpu/bundle.tar.xz ] || { echo "gpu_bundle.sh: .gpu/bundle.tar.xz missing (pack it, then carry .gpu)" >&2; exit 1; }
  if [ ! -d .gpu/root ]; then
    mkdir -p .gpu/x && tar -xJf .gpu/bundle.tar.xz -C .gpu/x
    mkdir -p "$build" && cp -r .gpu/x/"$build"/. "$build"/
    for d in .gpu/x/debs/*.deb; do dpkg -x "$d" .gpu/root; done
    ln -sf orterun .gpu/root/usr/bin/mpiexec
    rm -rf .gpu/x
  fi
  local root usr cuda=""
  root=$(cd .gpu/root && pwd)
  usr=$root/usr/lib/x86_64-linux-gnu
  for l in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9; do
    cuda="$cuda:$(lib_dir "$l")"
  done
  export LD_LIBRARY_PATH="$usr:$usr/openblas-openmp$cuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PATH="$root/usr/bin:$PATH" OPAL_PREFIX="$root/usr"
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  bash -c "$1"
}

case "${1:-}" in
  pack) pack ;;
  run) [ $# -eq 2 ] || { echo "usage: bench/gpu_bundle.sh run 'COMMAND'" >&2; exit 2; }; run "$2" ;;
  *) echo "usage: bench/gpu_bundle.sh pack | run 'COMMAND'" >&2; exit 2 ;;
esac
