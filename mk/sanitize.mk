# Sanitizer variants (tests/README.md "Sanitizers"), included by the Makefile before its rules.
# SANITIZE=1: ASan+UBSan (build/release-asan), SANITIZE=thread: TSan (build/release-tsan). -O1:
# the sanitizers' checks do not need -O3's vectorised loops, and it compiles much faster. Each
# variant compiles only what tests/run_all.sh runs on it (its `sanitize-variant` goal below):
# neither has the PyTorch parity tests (minutes even unsanitized) nor with them the float64 copy
# of the core (tests/f64), nor the CUDA cases.
ifeq ($(SANITIZE),1)
  CXXFLAGS += -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
  LDFLAGS  += -fsanitize=address,undefined
else ifeq ($(SANITIZE),thread)
  CXXFLAGS += -O1 -fsanitize=thread -fno-omit-frame-pointer
  LDFLAGS  += -fsanitize=thread
endif
# A model's weight initialisation (src/core/rng.cpp's draws, vectorised at -O3) was a fifth
# of the ASan unit tests' time at -O1; at -O3 the file is instrumented all the same.
ifneq ($(SANITIZE),0)
  $(BUILD)/obj/src/core/rng.o: CXXFLAGS += -O3
  TEST_OBJ := $(filter-out %/test_model_parity.o %/test_cuda.o,$(TEST_OBJ))
  F64_TEST_OBJ :=
  F64_LIB :=
endif
# ASan runs the unit tests (but the slow sweeps run_all.sh leaves out), all the MPI tests, and the
# programs the unit tests start: every data tool and app (not linked to ./train).
SANITIZE_BIN := $(TEST_BIN) $(MPI_TEST_BIN) $(TOOLS_BIN) $(APPS_BIN)
# TSan checks the threaded code: the loader's workers, the tar-shard stream's reader thread, and
# the pipeline's stages (whose tests run ./train, ./pipeline_eval and export_images, under
# mpiexec), and GradSync's progress thread
# (tests/mpi/test_dist_grad_sync.cpp); only those tests and programs are compiled.
# Its library leaves out the recommender (src/recommend), which none of them calls.
ifeq ($(SANITIZE),thread)
  LIB_OBJ := $(filter-out $(BUILD)/obj/src/recommend/%,$(LIB_OBJ))
  TEST_OBJ := $(filter %/test_main.o %/test_loader.o %/test_shards.o %/test_pipeline_eval.o,$(TEST_OBJ))
  MPI_TEST_OBJ := $(filter %/mpi_main.o %/test_dist_grad_sync.o,$(MPI_TEST_OBJ))
  SANITIZE_BIN := $(TEST_BIN) $(MPI_TEST_BIN) $(OUT)/bin/export_images $(OUT)/bin/train $(OUT)/bin/pipeline_eval
endif

.PHONY: sanitize-build sanitize-asan sanitize-tsan sanitize-variant
# Both variants, side by side under the caller's job server (make -j).
sanitize-build: sanitize-asan sanitize-tsan
sanitize-asan:
	+$(MAKE) --no-print-directory SANITIZE=1 sanitize-variant
sanitize-tsan:
	+$(MAKE) --no-print-directory SANITIZE=thread sanitize-variant
sanitize-variant: $(SANITIZE_BIN)
