#!/usr/bin/env bash
# Installs the Debian packages that platipus's build, tests, examples, plots
# and CPU peer benchmarks need (Debian 12 or later; Ubuntu 24.04 works too),
# the image readers' stb and zlib and Debian's Fashion-MNIST among them;
# libxsmm the CPU backend's small matrix products (backend/cpu/small_gemm.hpp);
# python3-venv the Python package's virtual environment (pip install .);
# clang and libclang-rt-dev build the libFuzzer targets (the fuzz preset);
# Open MPI builds platipus::mpi and runs the distributed tests (mpirun).
# The CUDA toolkit is not installed here: when /usr/local/cuda (or nvcc on
# the PATH) is present, CMake builds the CUDA targets as well.
set -euo pipefail
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
$sudo apt-get update
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends \
  build-essential cmake \
  libeigen3-dev libfmt-dev catch2 libcli11-dev nlohmann-json3-dev libbenchmark-dev \
  libstb-dev zlib1g-dev dataset-fashion-mnist libxsmm-dev \
  python3 python3-matplotlib python3-venv \
  clang libclang-rt-dev \
  libopenmpi-dev openmpi-bin
