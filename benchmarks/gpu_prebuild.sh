#!/usr/bin/env bash
# Builds the programs that benchmarks/gpu_check.sh runs, for a GPU machine
# that lacks the build's dependencies or whose time is too dear to compile
# on: the CUDA tests, the GPU benchmark, and the sine_line, circles and
# active_learning examples (on the CPU and on the GPU). Run from the
# repository root on any machine with the project's dependencies and nvcc:
#
#   benchmarks/gpu_prebuild.sh DIR
#
# DIR gets bin/ (the programs), lib/ (the shared libraries they need beyond
# glibc, libstdc++ and CUDA's own, such as libfmt and libbenchmark) and
# built-from.txt (the commit). Then, on the GPU machine:
#
#   OUT=/tmp/gpu-check PREBUILT=DIR benchmarks/gpu_check.sh
#
# The programs are built for CUDA architecture 90 (CUDA_ARCH overrides) and
# for a generic x86-64 CPU (no -march=native: the GPU machine's CPU may
# differ), with the build machine's glibc, which must not be newer than the
# GPU machine's.
set -euo pipefail

DIR=${1:?usage: benchmarks/gpu_prebuild.sh DIR}
BUILD=${BUILD:-build/gpu-prebuild}
ARCH=${CUDA_ARCH:-90}
JOBS=${JOBS:-$(nproc)}
programs=(tests/platipus_cuda_tests benchmarks/platipus_cuda_benchmarks examples/sine_line
  examples/sine_line_cuda examples/circles_cuda examples/active_learning_cuda)

cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DPLATIPUS_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH" \
  -DPLATIPUS_NATIVE=OFF -DPLATIPUS_BUILD_TESTS=ON -DPLATIPUS_BUILD_EXAMPLES=ON -DPLATIPUS_BUILD_BENCHMARKS=ON
cmake --build "$BUILD" -j"$JOBS" --target "${programs[@]##*/}"

rm -rf "$DIR"
mkdir -p "$DIR/bin" "$DIR/lib"
for program in "${programs[@]}"; do
  cp "$BUILD/$program" "$DIR/bin/"
  strip --strip-unneeded "$DIR/bin/${program##*/}"
done
# The libraries to carry: what the programs load, less the C and C++
# runtimes and the CUDA driver, runtime, cuBLAS and cuDNN, which the GPU machine has.
ldd "$DIR"/bin/* | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u |
  grep -Ev '/(ld-linux|libc|libm|libdl|librt|libpthread|libgcc_s|libstdc\+\+|libcuda|libcudart|libcublas|libcublasLt|libcudnn[a-z_]*)\.so' |
  while read -r library; do cp -L "$library" "$DIR/lib/"; done
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' with uncommitted changes'), built $(date -u '+%Y-%m-%d %H:%M UTC') on $(. /etc/os-release && echo "$PRETTY_NAME"), CUDA architectures $ARCH" \
  >"$DIR/built-from.txt"
du -sh "$DIR"/bin "$DIR"/lib
ls "$DIR/lib"
