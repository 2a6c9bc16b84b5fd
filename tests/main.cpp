// The test runner's main for Catch2 v2; with v3, Catch2WithMain provides it.
#define CATCH_CONFIG_MAIN
#include "catch.hpp"
