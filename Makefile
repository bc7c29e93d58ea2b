# mpicnn build: one Makefile, pattern rules, a static library of src/ that apps, tests and
# benchmarks link. `make` builds everything, `make test` installs deps and runs the suite.
CUDA     ?= 0
DEBUG    ?= 0
SANITIZE ?= 0

CXX      ?= g++
PYTHON   ?= /usr/bin/python3

# CPU instruction set: native where the programs run on the machine that built them;
# bench/gpu_bundle.sh builds x86-64-v3 (AVX2) ones to carry to another machine. A non-native
# set builds in its own folder (objects do not record the flags they were made with).
CPU_ARCH ?= native
# MUTANT=N: one deliberate bug of src/core/mutant.h switched on, for tests/mutation/run.sh only.
MUTANT   ?= 0
VARIANT  := $(if $(filter 1,$(DEBUG)),debug,release)$(if $(filter 1,$(SANITIZE)),-asan,)$(if $(filter thread,$(SANITIZE)),-tsan,)$(if $(filter-out native,$(CPU_ARCH)),-$(CPU_ARCH),)$(if $(filter-out 0,$(MUTANT)),-mutant$(MUTANT),)
BUILD    := build/$(VARIANT)
# src/ compiles once for both builds (it sees the GPU only through src/core/gpu.h); what differs
# is the backend linked in: kernels/*.cu (CUDA=1) or src/core/gpu_absent.cpp. Linked programs go
# to OUT: $(BUILD) for the CPU build, $(BUILD)/cuda for the CUDA one, which shares the objects.
OUT      := $(BUILD)$(if $(filter 1,$(CUDA)),/cuda,)
CUDA_HOME ?= /usr/local/cuda
NVCC     ?= $(CUDA_HOME)/bin/nvcc
# sm_80 (A100) and sm_90 (H100/H200) machine code, plus sm_90 PTX for newer GPUs to JIT.
CUDA_ARCH ?= 80 90

CPPFLAGS := -Isrc -Itests -I/usr/include/stb -isystem /usr/include/eigen3 -DMPICNN_SOURCE_DIR='"$(CURDIR)"'
ifneq ($(MUTANT),0)
  CPPFLAGS += -DMPICNN_MUTANT=$(MUTANT)
endif
# -fno-math-errno: nothing reads errno, and it lets GCC vectorise sqrt (AdamW 67 -> 14 ms per
# step on 11.7M parameters). No -ffast-math: results must match PyTorch bit for bit.
CXXFLAGS := -std=c++20 -Wall -Wextra -fopenmp -march=$(CPU_ARCH) -fno-math-errno -MMD -MP
LDFLAGS  := -fopenmp
# OpenBLAS's OpenMP build (not the pthreads default): with one OpenMP runtime for our loops and
# BLAS, idle threads of one pool no longer spin on the cores the other needs (measured in
# bench/RESULTS.md: the pthreads build halved 3x3 conv throughput on 2 cores).
OPENBLAS_DIR := /usr/lib/x86_64-linux-gnu/openblas-openmp
LDLIBS   := -L$(OPENBLAS_DIR) -Wl,-rpath,$(OPENBLAS_DIR) -l:libopenblas.so.0 -lboost_program_options -ljpeg -lz -lpthread
# ./recommend: XGBoost's C API (fit, suggest) and cpp-httplib (serve), Debian's builds of both.
# httplib's header must be compiled with the defines its library was built with (pkg-config).
LDLIBS   += -lxgboost -lcpp-httplib
# Detection datasets: Pascal VOC annotations are read with TinyXML-2 (Debian's libtinyxml2-dev).
LDLIBS   += -ltinyxml2
HTTPLIB_CPPFLAGS := $(shell pkg-config --cflags cpp-httplib 2>/dev/null)
# MPI (OpenMPI from `make deps`): flags from its C wrapper, so the compiler stays $(CXX); the
# deprecated C++ bindings are skipped (we call the C API), system includes keep -Wall quiet.
CPPFLAGS += -DOMPI_SKIP_MPICXX=1 $(patsubst -I%,-isystem %,$(shell mpicc --showme:compile 2>/dev/null))
LDLIBS   += $(shell mpicc --showme:link 2>/dev/null)
ifeq ($(DEBUG),1)
  CXXFLAGS += -O0 -g
else
  CXXFLAGS += -O3 -g1
endif

# Debian packages the project and its tests need (installed by `make deps`).
DEB_PACKAGES := g++ make openmpi-bin libopenmpi-dev libopenblas-dev libopenblas0-openmp libeigen3-dev \
  libboost-program-options-dev doctest-dev libstb-dev libjpeg62-turbo-dev nlohmann-json3-dev \
  zlib1g-dev python3-torch python3-torchvision python3-numpy python3-pil dataset-fashion-mnist \
  slurm-wlm iproute2 clang libclang-rt-14-dev libxgboost-dev libcpp-httplib-dev chromium curl pkg-config \
  libtinyxml2-dev

LIB_SRC   := $(sort $(shell find src -name '*.cpp' ! -path 'src/apps/*' ! -name gpu_absent.cpp))
LIB_OBJ   := $(LIB_SRC:%.cpp=$(BUILD)/obj/%.o)
LIB       := $(BUILD)/libmpicnn.a
TEST_SRC  := $(sort $(wildcard tests/*.cpp))
TEST_OBJ  := $(TEST_SRC:%.cpp=$(BUILD)/obj/%.o)
TEST_BIN  := $(OUT)/tests/unit_tests
# MPI tests: tests/mpi/*.cpp -> one doctest binary that tests/run_all.sh runs under mpiexec.
MPI_TEST_SRC := $(sort $(wildcard tests/mpi/*.cpp))
MPI_TEST_OBJ := $(MPI_TEST_SRC:%.cpp=$(BUILD)/obj/%.o)
MPI_TEST_BIN := $(OUT)/tests/mpi_tests
BENCH_SRC := $(sort $(wildcard bench/*.cpp))
BENCH_BIN := $(BENCH_SRC:bench/%.cpp=$(OUT)/bench/%)
# The numerical core built a second time in double precision, for the unit tests only: real =
# double (src/core/real.h) and the namespace renamed mpicnn_f64, so both engines link into one
# binary and tests/test_model_parity.cpp checks each case on both from one set of PyTorch
# references (tests/f64/: the float64 half, compared with PyTorch float64 to 1e-10).
F64_SRC   := src/core/check.cpp src/core/tensor.cpp src/core/rng.cpp src/core/threads.cpp src/core/profile.cpp \
  src/core/blas.cpp src/core/gpu.cpp src/core/gpu_absent.cpp $(sort $(wildcard src/layers/*.cpp)) \
  $(sort $(wildcard src/models/*.cpp)) src/optim/optimizer.cpp src/optim/sgd.cpp src/optim/adamw.cpp \
  src/io/safetensors.cpp src/io/safetensors_writer.cpp src/io/safetensors_crc.cpp src/io/atomic_file.cpp
F64_FLAGS := -DMPICNN_F64=1 -Dmpicnn=mpicnn_f64
F64_OBJ   := $(F64_SRC:%.cpp=$(BUILD)/obj-f64/%.o)
F64_LIB   := $(BUILD)/libmpicnn_f64.a
F64_TEST_SRC := $(sort $(wildcard tests/f64/*.cpp))
F64_TEST_OBJ := $(F64_TEST_SRC:%.cpp=$(BUILD)/obj-f64/%.o)
# Data tools: data_tools/X.cpp -> $(BUILD)/bin/X (thin mains over the library).
TOOLS_SRC := $(sort $(wildcard data_tools/*.cpp))
TOOLS_BIN := $(TOOLS_SRC:data_tools/%.cpp=$(OUT)/bin/%)
# Apps: src/apps/X.cpp -> $(BUILD)/bin/X, linked to ./X at the top (what users run: mpiexec ./train).
APPS_SRC  := $(sort $(wildcard src/apps/*.cpp))
APPS      := $(APPS_SRC:src/apps/%.cpp=%)
# The GPU backend: kernels/X.cu -> $(BUILD)/obj/kernels/X.o with nvcc, or the CPU build's none.
CU_SRC    := $(sort $(wildcard kernels/*.cu))
CU_OBJ    := $(CU_SRC:%.cu=$(BUILD)/obj/%.o)
ifeq ($(CUDA),1)
  ifeq ($(wildcard $(NVCC)),)
    $(error CUDA=1: nvcc not found at $(NVCC) (set CUDA_HOME=/path/to/cuda))
  endif
  BACKEND := $(CU_OBJ)
  CUDA_LIBDIR := $(firstword $(wildcard $(CUDA_HOME)/lib64 $(CUDA_HOME)/lib))
  LDLIBS  += -L$(CUDA_LIBDIR) -Wl,-rpath,$(CUDA_LIBDIR) -lcudnn -lcublas -lcudart
else
  BACKEND := $(BUILD)/obj/src/core/gpu_absent.o
endif
NVCCFLAGS := -std=c++20 -O3 -Isrc -Ikernels -Xcompiler -Wall,-Wextra \
  $(foreach a,$(CUDA_ARCH),-gencode arch=compute_$(a),code=sm_$(a)) \
  -gencode arch=compute_$(lastword $(CUDA_ARCH)),code=compute_$(lastword $(CUDA_ARCH)) -MMD -MP

# ---- Sanitizers (issue 23; tests/README.md "Sanitizers") --------------------------------------
# SANITIZE=1: ASan+UBSan (build/release-asan), SANITIZE=thread: TSan (build/release-tsan). -O1:
# the sanitizers' checks do not need -O3's vectorised loops, and it compiles much faster. Their
# unit_tests leave out the PyTorch parity tests (minutes even unsanitized) and with them the
# float64 copy of the core (tests/f64, a second build of the core), and the CUDA cases.
# `make sanitize-build` builds what tests/run_all.sh's sanitizer suites run.
ifeq ($(SANITIZE),1)
  CXXFLAGS += -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
  LDFLAGS  += -fsanitize=address,undefined
else ifeq ($(SANITIZE),thread)
  CXXFLAGS += -O1 -fsanitize=thread -fno-omit-frame-pointer
  LDFLAGS  += -fsanitize=thread
endif
ifneq ($(SANITIZE),0)
  TEST_OBJ := $(filter-out %/test_model_parity.o %/test_cuda.o,$(TEST_OBJ))
  F64_TEST_OBJ :=
  F64_LIB :=
endif
# TSan checks the threaded code: the loader's workers and the pipeline's stages (whose tests run
# ./pipeline_eval under mpiexec); only those test files are compiled.
ifeq ($(SANITIZE),thread)
  TEST_OBJ := $(filter %/test_main.o %/test_loader.o %/test_pipeline_eval.o,$(TEST_OBJ))
endif
# What tests/run_all.sh's sanitizer suites run: the test binaries and the programs the unit tests
# start (data tools, apps; not linked to ./train). This block comes before the first rule, so the
# default goal is set to stay `all`.
.DEFAULT_GOAL := all
.PHONY: sanitize-build sanitize-variant
sanitize-build:
	$(MAKE) --no-print-directory SANITIZE=1 sanitize-variant
	$(MAKE) --no-print-directory SANITIZE=thread sanitize-variant
sanitize-variant: $(TEST_BIN) $(MPI_TEST_BIN) $(TOOLS_BIN) $(APPS_SRC:src/apps/%.cpp=$(OUT)/bin/%)
# ---- end of the sanitizer block ----------------------------------------------------------------

.PHONY: all lib apps tests bench tools deps test demo clean cuda-build fuzz fuzz-build
# Bench objects are intermediates of a pattern chain; keep them so `make` does not rebuild them.
.SECONDARY: $(BENCH_SRC:%.cpp=$(BUILD)/obj/%.o) $(TOOLS_SRC:%.cpp=$(BUILD)/obj/%.o) $(APPS_SRC:%.cpp=$(BUILD)/obj/%.o)
all: lib apps tests bench tools
lib: $(LIB)
apps: $(APPS)
tests: $(TEST_BIN) $(MPI_TEST_BIN)
bench: $(BENCH_BIN)
tools: $(TOOLS_BIN)

$(BUILD)/obj/%.o: %.cpp
	@mkdir -p $(@D)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) -c $< -o $@

# The optimizers' steps are bit-identical to their CUDA kernels (kernels/optim.cu) and as close
# to torch's separate ops as rounding allows, so a*b + c is fused only where the code says
# std::fma: g++ contracts C++ by default (-ffp-contract=fast, whatever -std says).
$(BUILD)/obj/src/optim/%.o $(BUILD)/obj-f64/src/optim/%.o: CXXFLAGS += -ffp-contract=off

# httplib's Request holds an SSL pointer only under CPPHTTPLIB_OPENSSL_SUPPORT: serve.o built
# without the library's defines would read its requests with the wrong layout, so no flags stop
# the build (an order-only check: it never forces a rebuild).
$(BUILD)/obj/src/recommend/serve.o: CPPFLAGS += $(HTTPLIB_CPPFLAGS)
$(BUILD)/obj/src/recommend/serve.o: | httplib-flags
.PHONY: httplib-flags
httplib-flags:
	@test -n "$(HTTPLIB_CPPFLAGS)" || { echo "src/recommend/serve.cpp: 'pkg-config --cflags cpp-httplib' gave no flags (make deps installs libcpp-httplib-dev and pkg-config)" >&2; exit 1; }

# The direct convolution's kernels, one copy per instruction set, picked at run time by
# layers/conv_direct.cpp: the AVX-512 copy whatever the build machine has, the AVX2 copy with
# every AVX-512 extension off, so that it runs on CPUs without them.
$(BUILD)/obj/src/layers/cpu/conv_direct_avx512.o: CXXFLAGS += -mavx512f -mfma
$(BUILD)/obj/src/layers/cpu/conv_direct_avx2.o: CXXFLAGS += -mavx2 -mfma -mno-avx512f

$(BUILD)/obj-f64/%.o: %.cpp
	@mkdir -p $(@D)
	$(CXX) $(CPPFLAGS) $(F64_FLAGS) $(CXXFLAGS) -c $< -o $@

$(F64_LIB): $(F64_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/obj/kernels/%.o: kernels/%.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(LIB): $(LIB_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(TEST_BIN): $(TEST_OBJ) $(F64_TEST_OBJ) $(LIB) $(F64_LIB) $(BACKEND)
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) $(TEST_OBJ) $(F64_TEST_OBJ) $(BACKEND) $(LIB) $(F64_LIB) $(LDLIBS) -o $@

$(MPI_TEST_BIN): $(MPI_TEST_OBJ) $(LIB) $(BACKEND)
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) $(MPI_TEST_OBJ) $(BACKEND) $(LIB) $(LDLIBS) -o $@

$(OUT)/bench/%: $(BUILD)/obj/bench/%.o $(LIB) $(BACKEND)
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) $< $(BACKEND) $(LIB) $(LDLIBS) -o $@

$(OUT)/bin/%: $(BUILD)/obj/data_tools/%.o $(LIB) $(BACKEND)
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) $< $(BACKEND) $(LIB) $(LDLIBS) -o $@

$(OUT)/bin/%: $(BUILD)/obj/src/apps/%.o $(LIB) $(BACKEND)
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) $< $(BACKEND) $(LIB) $(LDLIBS) -o $@

$(APPS): %: $(OUT)/bin/%
	ln -sf $< $@

# The CUDA build's programs without re-pointing ./train: what `make test` compiles and links
# when nvcc is present, so CI proves the GPU build (apps, tests, benchmarks, data tools) even
# on a machine without a GPU.
cuda-build:
	$(MAKE) --no-print-directory CUDA=1 $(BUILD)/cuda/tests/unit_tests $(BUILD)/cuda/tests/mpi_tests \
	  $(APPS_SRC:src/apps/%.cpp=$(BUILD)/cuda/bin/%) $(BENCH_SRC:bench/%.cpp=$(BUILD)/cuda/bench/%) \
	  $(TOOLS_SRC:data_tools/%.cpp=$(BUILD)/cuda/bin/%)

# ---- Fuzzing (tests/fuzz/, tests/README.md) ----------------------------------------------------
# libFuzzer harnesses, one per parser of outside data, built with clang (libFuzzer is clang's)
# under ASan and UBSan into build/fuzz/fuzz_NAME. Only the parsers and what they call on the
# way (FUZZ_LIB_SRC) are compiled with clang, instrumented for coverage and the sanitizers, as
# objects of their own (the flags differ from g++'s); the rest (the model registry behind
# --model, the models behind a checkpoint) links from the g++ library $(LIB): the objects come
# first, so the library never supplies a second copy of them. A whole-library clang build
# would take 5-10 times as long. `make fuzz` runs each harness for FUZZ_SECONDS
# (tests/fuzz/run.sh); the working corpus grows in build/fuzz/corpus/NAME and anything found
# lands in build/fuzz/artifacts/NAME/.
FUZZ_CXX      ?= clang++
FUZZ_SECONDS  ?= 60
FUZZ_DIR      := build/fuzz
# tests/fuzz/ubsan_ignore.txt: third-party code left unchecked, each entry with its reason.
FUZZ_SAN      := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer \
  -fsanitize-ignorelist=tests/fuzz/ubsan_ignore.txt
FUZZ_CXXFLAGS := -std=c++20 -O1 -g -march=$(CPU_ARCH) -Wall -Wextra -Wno-unknown-warning-option -MMD -MP $(FUZZ_SAN)
FUZZ_SRC      := $(sort $(wildcard tests/fuzz/fuzz_*.cpp))
FUZZ_NAMES    := $(FUZZ_SRC:tests/fuzz/fuzz_%.cpp=%)
FUZZ_BIN      := $(FUZZ_NAMES:%=$(FUZZ_DIR)/fuzz_%)
FUZZ_LIB_SRC  := src/core/check.cpp src/core/cli.cpp src/core/gpu_absent.cpp src/data/idx.cpp \
  src/data/cifar.cpp src/data/csv_dataset.cpp src/data/image.cpp src/io/atomic_file.cpp \
  src/io/safetensors.cpp src/io/checkpoint.cpp src/optim/schedule.cpp src/train/options.cpp
FUZZ_LIB_OBJ  := $(FUZZ_LIB_SRC:%.cpp=$(FUZZ_DIR)/obj/%.o)

$(FUZZ_DIR)/obj/%.o: %.cpp tests/fuzz/ubsan_ignore.txt
	@mkdir -p $(@D)
	$(FUZZ_CXX) $(CPPFLAGS) $(FUZZ_CXXFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

# -fopenmp: the g++ library's objects call libgomp.
$(FUZZ_DIR)/fuzz_%: $(FUZZ_DIR)/obj/tests/fuzz/fuzz_%.o $(FUZZ_LIB_OBJ) $(LIB)
	$(FUZZ_CXX) $(FUZZ_SAN) -fsanitize=fuzzer $< $(FUZZ_LIB_OBJ) $(LIB) $(LDLIBS) -lgomp -o $@

# Objects of a pattern chain: kept, so that the next `make fuzz-build` does not rebuild them.
.SECONDARY: $(FUZZ_LIB_OBJ) $(FUZZ_SRC:%.cpp=$(FUZZ_DIR)/obj/%.o)
fuzz-build: $(FUZZ_BIN)

fuzz: deps
	$(MAKE) --no-print-directory -j$$(nproc) fuzz-build
	@for n in $(FUZZ_NAMES); do \
	  echo "== fuzz_$$n: $(FUZZ_SECONDS) s"; \
	  bash tests/fuzz/run.sh $$n $(FUZZ_SECONDS) $(FUZZ_DIR) || exit 1; \
	done

# Installs only what is missing; as root directly, otherwise through sudo.
deps:
	@missing=""; for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "make deps: installing$$missing"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi; \
	  $$SUDO apt-get update -qq && \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

# deps first, then a fresh make so the build sees what deps installed.
test: deps
	$(MAKE) --no-print-directory -j$$(nproc) apps tests bench tools fuzz-build
	@if [ -x $(NVCC) ]; then $(MAKE) --no-print-directory -j$$(nproc) cuda-build; \
	  else echo "make test: no nvcc at $(NVCC): the CUDA build is not compiled"; fi
	$(MAKE) --no-print-directory -j$$(nproc) sanitize-build
	PYTHON=$(PYTHON) bash tests/run_all.sh $(BUILD)

# The main job on the built-in default (lenet on Fashion-MNIST, 10 epochs) on 2 ranks; about
# 1.5-3 minutes on 2 cores, ends near 91% test accuracy. The run goes to runs/lenet-<time>.
DEMO_RANKS ?= 2
demo: deps
	$(MAKE) --no-print-directory -j$$(nproc) apps
	@run=runs/demo-$$(date +%Y%m%d-%H%M%S) && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 && \
	  echo "mpiexec -n $(DEMO_RANKS) --oversubscribe ./train -s $$run" && \
	  mpiexec -n $(DEMO_RANKS) --oversubscribe ./train -s $$run && \
	  echo "mpiexec -n 4 --oversubscribe ./pipeline_eval --checkpoint $$run --compare -o $$run/eval" && \
	  mpiexec -n 4 --oversubscribe ./pipeline_eval --checkpoint $$run --compare -o $$run/eval

# Faster R-CNN (ResNet-18 FPN, from random weights) on a seeded synthetic shapes set (VOC
# folders data/shapes-demo/train and data/shapes-demo/test, made once), 2 ranks; prints each
# epoch's losses and the test mAP, then evaluates the run with ./pipeline_eval on 3 ranks
# (boxes in RUN/eval/predictions.csv; measured figures: bench/RESULTS.md).
.PHONY: demo-detect
demo-detect: deps
	$(MAKE) --no-print-directory -j$$(nproc) apps tools
	@test -d data/shapes-demo/train || $(OUT)/bin/make_detection_dataset --out data/shapes-demo/train --count 400 --seed 1 --min-size 128 --max-size 160 --min-object 32 --max-objects 4
	@test -d data/shapes-demo/test || $(OUT)/bin/make_detection_dataset --out data/shapes-demo/test --count 50 --seed 2 --min-size 128 --max-size 160 --min-object 32 --max-objects 4
	@run=runs/demo-detect-$$(date +%Y%m%d-%H%M%S) && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 && \
	  cmd="mpiexec -n 2 --oversubscribe ./train --task detection -m fasterrcnn_resnet18_fpn -d data/shapes-demo --min-size 128 --max-size 160 -e 9 -lr 0.02 --warmup-epochs 1 --eval-every 3 --box-batch-size-per-image 128 --rpn-post-nms-top-n-test 300 -s $$run" && \
	  echo "$$cmd" && $$cmd && \
	  echo "mpiexec -n 3 --oversubscribe ./pipeline_eval -c $$run -b 2 -o $$run/eval" && \
	  mpiexec -n 3 --oversubscribe ./pipeline_eval -c $$run -b 2 -o $$run/eval

# Rank failure trials (bench/reliability.sh): seeded kills of one rank of ./train and
# ./pipeline_eval; prints the time-to-exit distribution (figures in bench/RESULTS.md).
.PHONY: reliability
reliability:
	$(MAKE) --no-print-directory -j$$(nproc) apps tools
	bash bench/reliability.sh

clean:
	rm -rf build

-include $(FUZZ_LIB_OBJ:.o=.d) $(FUZZ_SRC:%.cpp=$(FUZZ_DIR)/obj/%.d) $(F64_OBJ:.o=.d) $(F64_TEST_OBJ:.o=.d) $(CU_OBJ:.o=.d) $(BUILD)/obj/src/core/gpu_absent.d $(APPS_SRC:%.cpp=$(BUILD)/obj/%.d) $(LIB_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(MPI_TEST_OBJ:.o=.d) $(BENCH_SRC:%.cpp=$(BUILD)/obj/%.d) $(TOOLS_SRC:%.cpp=$(BUILD)/obj/%.d)
