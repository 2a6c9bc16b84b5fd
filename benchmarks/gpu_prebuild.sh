#!/usr/bin/env bash
# Builds the programs that benchmarks/gpu_check.sh runs, for a GPU machine
# that lacks the build's dependencies or whose time is too dear to compile
# on: the CUDA tests, the GPU benchmark, the sine_line, circles and
# active_learning examples (on the CPU and on the GPU) and, where NCCL and
# MPI are found, the distributed parity test. Run from the repository root
# on any machine with the project's dependencies and nvcc:
#
#   benchmarks/gpu_prebuild.sh DIR
#
# DIR gets bin/ (the programs), lib/ (the shared libraries they need beyond
# glibc, libstdc++ and CUDA's own, such as libfmt and libbenchmark),
# openmpi/ (this machine's Open MPI, mpirun and its plugins, for a GPU
# machine without one: gpu_check.sh relocates it with OPAL_PREFIX) and
# built-from.txt (the commit), and, where DEVICE_PYTHON names a Python of
# the GPU machine's version (3.12) with the pinned nanobind and
# scikit-build-core installed, python/ (the Python package with its CUDA
# learners, unpacked from its wheel, for PYTHONPATH):
#
#   ~/.pyenv/versions/3.12.1/bin/python3 -m venv /opt/py312
#   /opt/py312/bin/pip install nanobind==3.1.0 scikit-build-core==1.1.2
#   DEVICE_PYTHON=/opt/py312/bin/python benchmarks/gpu_prebuild.sh DIR
#
# Then, on the GPU machine:
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
if cmake --build "$BUILD" --target help | grep distributed_cuda_test >/dev/null; then
  programs+=(tests/distributed_cuda_test)
fi
cmake --build "$BUILD" -j"$JOBS" --target "${programs[@]##*/}"

rm -rf "$DIR"
mkdir -p "$DIR/bin" "$DIR/lib"
for program in "${programs[@]}"; do
  cp "$BUILD/$program" "$DIR/bin/"
  strip --strip-unneeded "$DIR/bin/${program##*/}"
done
if [[ -n ${DEVICE_PYTHON:-} ]]; then
  rm -rf "$BUILD-wheel"
  "$DEVICE_PYTHON" -m pip wheel --no-build-isolation --no-deps . -w "$BUILD-wheel" -C build-dir="$BUILD-python" \
    -C cmake.define.PLATIPUS_NATIVE=OFF -C cmake.define.PLATIPUS_WITH_CUDA=ON \
    -C cmake.define.CMAKE_CUDA_ARCHITECTURES="$ARCH" -C cmake.build-type=Release
  "$DEVICE_PYTHON" -m zipfile -e "$BUILD-wheel"/platipus-*.whl "$DIR/python"
  strip --strip-unneeded "$DIR"/python/platipus/_platipus*.so
fi
# The libraries to carry: what the programs load, less the C and C++
# runtimes and the CUDA driver, runtime, cuBLAS, cuDNN and NCCL, which the GPU
# machine has (NCCL in PyTorch's packages).
ldd "$DIR"/bin/* $(ls "$DIR"/python/platipus/_platipus*.so 2>/dev/null) | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u |
  grep -Ev '/(ld-linux|libc|libm|libdl|librt|libpthread|libgcc_s|libstdc\+\+|libcuda|libcudart|libcublas|libcublasLt|libcudnn[a-z_]*|libnccl)\.so' |
  while read -r library; do cp -L "$library" "$DIR/lib/"; done
# Open MPI for `mpirun -np 2`, without the network transports a single
# machine does not use (UCX, libfabric, InfiniBand, PSM) or OpenSHMEM, and
# with the libraries of what is left that a GPU machine may lack.
if [[ -d /usr/lib/x86_64-linux-gnu/openmpi && -x /usr/bin/orterun ]]; then
  ompi=$DIR/openmpi
  mkdir -p "$ompi/usr/bin" "$ompi/usr/lib/x86_64-linux-gnu" "$ompi/usr/share" "$ompi/lib"
  cp -L /usr/bin/orterun /usr/bin/orted "$ompi/usr/bin/"
  ln -s orterun "$ompi/usr/bin/mpirun"
  cp -rL /usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/pmix2 "$ompi/usr/lib/x86_64-linux-gnu/"
  cp -rL /usr/share/openmpi "$ompi/usr/share/"
  find "$ompi" \( -path '*/include*' -o -path '*/pkgconfig*' -o -name '*java*' -o -name '*mpifh*' -o -name '*usempi*' \
    -o -regex '.*\(ucx\|ofi\|psm\|openib\|verbs\|usnic\|portals\|spml\|sshmem\|scoll\|atomic_\|memheap\|oshmem\|mxm\).*' \) \
    -prune -exec rm -rf {} +
  { find "$ompi/usr" -type f \( -name '*.so*' -o -name 'orte*' -o -name orted \) -exec ldd {} + 2>/dev/null || true; } |
    awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u | grep -Ev '/(openmpi|pmix2)/' |
    grep -Ev '/(ld-linux|libc|libm|libdl|librt|libpthread|libgcc_s|libstdc\+\+|libz|libudev)\.so' |
    while read -r library; do cp -L "$library" "$ompi/lib/"; done
fi
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' with uncommitted changes'), built $(date -u '+%Y-%m-%d %H:%M UTC') on $(. /etc/os-release && echo "$PRETTY_NAME"), CUDA architectures $ARCH" \
  >"$DIR/built-from.txt"
du -sh "$DIR"/*/
ls "$DIR/lib"
