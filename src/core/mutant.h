// Deliberate bugs for tests/mutation/run.sh, which builds the engine with MPICNN_MUTANT=N
// (make MUTANT=N) to prove that the parity tests catch each one. In every other build
// MPICNN_MUTANT is 0 and MUTANT(n) is a false constant, so each bug is compiled (it cannot rot)
// and then removed as dead code. Not a feature flag: nothing else may read it.
#pragma once

#ifndef MPICNN_MUTANT
#define MPICNN_MUTANT 0
#endif
#define MUTANT(n) (MPICNN_MUTANT == (n))
