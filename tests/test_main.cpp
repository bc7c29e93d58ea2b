// doctest entry point for the unit-test binary (all tests/*.cpp link into it).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "testing.h"
#include "case_times.h"
