# Finds what the library itself needs (Eigen 3.4, fmt). Programs' extra
# dependencies (Catch2, CLI11, Google Benchmark, ...) are found where used.
find_package(Eigen3 3.4 REQUIRED NO_MODULE)
find_package(fmt REQUIRED)
include(GNUInstallDirs)
