// For the programs that initialise MPI (dist::Comm), in AddressSanitizer builds (make
// SANITIZE=1): leak reports use ASan's slow unwinder, so that a leak's stack walks through
// OpenMPI's frames (built without frame pointers) to the call tests/sanitize/lsan.supp matches;
// with the fast one those stacks end in "<unknown module>". Every other program keeps the fast
// unwinder, which runs the unit tests under ASan in half the time. Included once, by the mains
// that make a Comm: train, pipeline_eval and the MPI tests. ASAN_OPTIONS still overrides it.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
extern "C" __attribute__((used, visibility("default"))) const char* __asan_default_options() {
  return "fast_unwind_on_malloc=0";
}
#endif
