# `make test`: deps, every build the suites run, then tests/run_all.sh, printing how long each
# phase took (.ci/run repeats them in its summary). `make coverage`: line coverage of src/.
.PHONY: test test-build cpu-build test-cuda-build coverage

# The build's output also goes to $(BUILD)/test-build.log, where tests/run_all.sh counts the
# compiler warnings (a fresh clone replays every compile's from ccache, so CI sees them all).
test:
	@t=$$(date +%s); $(MAKE) --no-print-directory deps || exit 1; \
	echo "make test: deps took $$(($$(date +%s) - t)) s"; t=$$(date +%s); mkdir -p $(BUILD); \
	{ $(MAKE) --no-print-directory -j$$(nproc) test-build; echo $$? > $(BUILD)/test-build.rc; } 2>&1 | \
	  tee $(BUILD)/test-build.log; [ "$$(cat $(BUILD)/test-build.rc)" = 0 ] || exit 1; \
	echo "make test: build took $$(($$(date +%s) - t)) s"; \
	PYTHON=$(PYTHON) bash tests/run_all.sh $(BUILD)

# Under one job server: the CPU build, then the CUDA build that shares its objects (when nvcc is
# present, so CI proves the GPU build compiles even without a GPU), and beside them the two
# sanitizer variants, which share nothing with it.
cpu-build: apps tests bench tools fuzz-build
test-cuda-build: cpu-build
	+$(MAKE) --no-print-directory cuda-build
ifneq ($(wildcard $(NVCC)),)
test-build: cpu-build test-cuda-build sanitize-build
else
test-build: cpu-build sanitize-build
	@echo "make test: no nvcc at $(NVCC): the CUDA build is not compiled"
endif

# gcovr (Debian's) over a COVERAGE=1 build's unit and MPI tests: lines of src/ per folder. The
# build's programs (which the tests start) are made without re-pointing ./train.
coverage:
	$(MAKE) --no-print-directory deps EXTRA_PACKAGES=gcovr
	$(MAKE) --no-print-directory -j$$(nproc) COVERAGE=1 tests tools $(APPS:%=$(BUILD)-cov/bin/%)
	PYTHON=$(PYTHON) bash tests/coverage.sh $(BUILD)-cov
