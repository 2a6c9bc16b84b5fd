# Finds what the library itself needs (Eigen 3.4, fmt, nlohmann-json for
# checkpoint headers and metrics). Programs' extra dependencies (Catch2,
# CLI11, Google Benchmark, stb) are found where used.
find_package(Eigen3 3.4 REQUIRED NO_MODULE)
find_package(fmt REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
include(GNUInstallDirs)
