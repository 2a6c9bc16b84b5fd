// PLATIPUS_HD marks functions that nvcc compiles for both host and device;
// under g++ it expands to nothing.
#pragma once

#if defined(__CUDACC__)
#define PLATIPUS_HD __host__ __device__
#else
#define PLATIPUS_HD
#endif
