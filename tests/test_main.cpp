// doctest entry point for the unit-test binary (all tests/*.cpp link into it).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "testing.h"
#include "case_times.h"

// The environment's kernel overrides (MPICNN_BF16, MPICNN_GEMM, ...) apply before any test runs.
static const bool kExecApplied = (mpicnn::testing::exec(), true);
