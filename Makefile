# mpicnn build: a static library of src/ that apps, tests and benchmarks link, with pattern
# rules. `make` builds everything. What is not the build lives in mk/: deps.mk (Debian
# packages), sanitize.mk, fuzz.mk, test.mk (make test, coverage), demo.mk (demos, trials).
CUDA     ?= 0
DEBUG    ?= 0
SANITIZE ?= 0
# COVERAGE=1: gcov counters in every object (build/*-cov), for `make coverage` (mk/test.mk).
COVERAGE ?= 0

CXX      ?= g++
PYTHON   ?= /usr/bin/python3
# ccache in front of every compiler when installed (make deps installs it); CCACHE= turns it off.
# Nothing on a compile line names the clone's folder (-fdebug-prefix-map writes "." into the
# debug info, and ccache then leaves the folder out of its hash), so a fresh clone reuses the
# objects of any earlier build of the same sources: `ccache -s` shows the hits.
CCACHE   ?= $(shell command -v ccache 2>/dev/null)

# CPU instruction set: native where the programs run on the machine that built them;
# bench/gpu_bundle.sh builds x86-64-v3 (AVX2) ones to carry to another machine. A non-native
# set builds in its own folder (objects do not record the flags they were made with).
CPU_ARCH ?= native
# MUTANT=N: one deliberate bug of src/core/mutant.h switched on, for tests/mutation/run.sh only.
MUTANT   ?= 0
VARIANT  := $(if $(filter 1,$(DEBUG)),debug,release)$(if $(filter 1,$(SANITIZE)),-asan,)$(if $(filter thread,$(SANITIZE)),-tsan,)$(if $(filter-out native,$(CPU_ARCH)),-$(CPU_ARCH),)$(if $(filter-out 0,$(MUTANT)),-mutant$(MUTANT),)$(if $(filter 1,$(COVERAGE)),-cov,)
BUILD    := build/$(VARIANT)
# src/ compiles once for both builds (it sees the GPU only through src/core/gpu.h); what differs
# is the backend linked in: kernels/*.cu (CUDA=1) or src/core/gpu_absent.cpp. Linked programs go
# to OUT: $(BUILD) for the CPU build, $(BUILD)/cuda for the CUDA one, which shares the objects.
OUT      := $(BUILD)$(if $(filter 1,$(CUDA)),/cuda,)
CUDA_HOME ?= /usr/local/cuda
NVCC     ?= $(CUDA_HOME)/bin/nvcc
# sm_80 (A100) and sm_90 (H100/H200) machine code, plus sm_90 PTX for newer GPUs to JIT.
CUDA_ARCH ?= 80 90

CPPFLAGS := -Isrc -Itests -I/usr/include/stb -isystem /usr/include/eigen3
ifneq ($(MUTANT),0)
  CPPFLAGS += -DMPICNN_MUTANT=$(MUTANT)
endif
# -fno-math-errno: nothing reads errno, and it lets GCC vectorise sqrt (AdamW 67 -> 14 ms per
# step on 11.7M parameters). No -ffast-math: results must match PyTorch bit for bit.
CXXFLAGS := -std=c++20 -Wall -Wextra -fopenmp -march=$(CPU_ARCH) -fno-math-errno -MMD -MP \
  -fdebug-prefix-map=$(CURDIR)=.
# --as-needed: a program records only the shared libraries it calls (XGBoost and httplib are
# ./recommend's, TinyXML-2 the detection readers'). LLVM's lld where installed (make deps does):
# the ~60 links of `make test`'s variants in 23 s instead of 34 with GNU ld, a third of a fresh
# clone's build once ccache has every object.
LDFLAGS  := -fopenmp -Wl,--as-needed $(if $(shell command -v ld.lld 2>/dev/null),-fuse-ld=lld)
# OpenBLAS's OpenMP build (not the pthreads default): with one OpenMP runtime for our loops and
# BLAS, idle threads of one pool no longer spin on the cores the other needs (measured in
# bench/RESULTS.md: the pthreads build halved 3x3 conv throughput on 2 cores).
OPENBLAS_DIR := /usr/lib/x86_64-linux-gnu/openblas-openmp
LDLIBS   := -L$(OPENBLAS_DIR) -Wl,-rpath,$(OPENBLAS_DIR) -l:libopenblas.so.0 -lboost_program_options -ljpeg -larchive -lz -lpthread
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
ifeq ($(COVERAGE),1)
  CXXFLAGS += --coverage
  LDFLAGS  += --coverage
endif

LIB_SRC   := $(sort $(shell find src -name '*.cpp' ! -path 'src/apps/*' ! -name gpu_absent.cpp ! -name nccl_absent.cpp))
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
# references (tests/f64/: the float64 half, compared with PyTorch float64 to 1e-10). Only what
# the classifier models and optimizers need and call (the state dicts' safetensors): about 50
# files of the library's 120.
F64_SRC   := src/core/check.cpp src/core/tensor.cpp src/core/format.cpp src/core/exec.cpp \
  src/core/rng.cpp src/core/threads.cpp src/core/profile.cpp src/core/blas.cpp src/core/gpu.cpp \
  src/core/gpu_absent.cpp $(sort $(wildcard src/layers/*.cpp)) $(sort $(wildcard src/models/*.cpp)) \
  src/optim/optimizer.cpp src/optim/sgd.cpp src/optim/adamw.cpp \
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
APPS_BIN  := $(APPS:%=$(OUT)/bin/%)
# The GPU backend: kernels/X.cu -> $(BUILD)/obj/kernels/X.o with nvcc, or the CPU build's none.
# NCCL (--gpu-allreduce nccl): kernels/nccl_backend.cu when CUDA=1 finds nccl.h under NCCL_HOME
# or CUDA_HOME, else src/dist/nccl_absent.cpp, which refuses it.
CU_SRC    := $(sort $(wildcard kernels/*.cu))
NCCL_HOME ?=
NCCL_DIR  := $(firstword $(foreach d,$(NCCL_HOME) $(CUDA_HOME),$(if $(wildcard $(d)/include/nccl.h),$(d))))
ifeq ($(CUDA),1)
  ifeq ($(wildcard $(NVCC)),)
    $(error CUDA=1: nvcc not found at $(NVCC) (set CUDA_HOME=/path/to/cuda))
  endif
  CUDA_LIBDIR := $(firstword $(wildcard $(CUDA_HOME)/lib64 $(CUDA_HOME)/lib))
  LDLIBS  += -L$(CUDA_LIBDIR) -Wl,-rpath,$(CUDA_LIBDIR) -lcudnn -lcublas -lcudart
endif
ifneq ($(and $(filter 1,$(CUDA)),$(NCCL_DIR)),)
  NCCL_LIBDIR := $(firstword $(wildcard $(NCCL_DIR)/lib64 $(NCCL_DIR)/lib))
  NCCL_FLAGS := -DMPICNN_HAVE_NCCL=1 -I$(NCCL_DIR)/include
  LDLIBS  += -L$(NCCL_LIBDIR) -Wl,-rpath,$(NCCL_LIBDIR) -lnccl
else
  CU_SRC  := $(filter-out kernels/nccl_backend.cu,$(CU_SRC))
  NCCL_ABSENT := $(BUILD)/obj/src/dist/nccl_absent.o
endif
CU_OBJ    := $(CU_SRC:%.cu=$(BUILD)/obj/%.o)
ifeq ($(CUDA),1)
  BACKEND := $(CU_OBJ) $(NCCL_ABSENT)
else
  BACKEND := $(BUILD)/obj/src/core/gpu_absent.o $(NCCL_ABSENT)
endif
NVCCFLAGS := -std=c++20 -O3 -Isrc -Ikernels $(NCCL_FLAGS) -Xcompiler -Wall,-Wextra \
  $(foreach a,$(CUDA_ARCH),-gencode arch=compute_$(a),code=sm_$(a)) \
  -gencode arch=compute_$(lastword $(CUDA_ARCH)),code=compute_$(lastword $(CUDA_ARCH)) -MMD -MP

.DEFAULT_GOAL := all
# The sanitizer variants' flags and what they build (they change TEST_OBJ, so before the rules).
include mk/sanitize.mk

.PHONY: all lib apps tests bench tools clean cuda-build
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
	$(CCACHE) $(CXX) $(CPPFLAGS) $(CXXFLAGS) -c $< -o $@

# The optimizers' steps are bit-identical to their CUDA kernels (kernels/optim.cu) and as close
# to torch's separate ops as rounding allows, so a*b + c is fused only where the code says
# std::fma: g++ contracts C++ by default (-ffp-contract=fast, whatever -std says).
$(BUILD)/obj/src/optim/%.o $(BUILD)/obj-f64/src/optim/%.o: CXXFLAGS += -ffp-contract=off
# The host side of the GPU's BatchNorm math (layers/batchnorm_math.h) rounds as the device does.
$(BUILD)/obj/tests/test_batchnorm_math.o: CXXFLAGS += -ffp-contract=off

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
# The bf16 GEMM's vdpbf16ps kernels (core/cpu/gemm_bf16_avx512.cpp), called only on a CPU
# with AVX512-BF16 (core/gemm_bf16.cpp checks).
$(BUILD)/obj/src/core/cpu/gemm_bf16_avx512.o: CXXFLAGS += -mavx512f -mavx512bw -mavx512vl -mavx512bf16
# Its emulated AVX-512F kernels (core/cpu/gemm_bf16_avx512f.cpp), called only on a CPU with
# AVX-512F, BW and VL; -mfma so that each step is one vfmadd (what it emulates, bit for bit).
$(BUILD)/obj/src/core/cpu/gemm_bf16_avx512f.o: CXXFLAGS += -mavx512f -mavx512bw -mavx512vl -mfma -mno-avx512bf16
# The direct convolution's bf16 kernels (vdpbf16ps), called only on such a CPU
# (layers/conv_direct.cpp checks).
$(BUILD)/obj/src/layers/cpu/conv_direct_avx512bf16.o: CXXFLAGS += -mavx512f -mfma -mavx512bw -mavx512vl -mavx512bf16
# and their copy emulated in AVX-512F (layers/cpu/conv_direct_bf16_avx512f.cpp), called only on
# a CPU with AVX-512F, BW and VL, with the bf16 GEMM's emulated path.
$(BUILD)/obj/src/layers/cpu/conv_direct_bf16_avx512f.o: CXXFLAGS += -mavx512f -mavx512bw -mavx512vl -mfma -mno-avx512bf16

$(BUILD)/obj-f64/%.o: %.cpp
	@mkdir -p $(@D)
	$(CCACHE) $(CXX) $(CPPFLAGS) $(F64_FLAGS) $(CXXFLAGS) -c $< -o $@

$(F64_LIB): $(F64_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

# ccache hashes the working folder into nvcc's objects' keys, which hold no path (no -g): told not
# to, a fresh clone reuses them too.
$(BUILD)/obj/kernels/%.o: kernels/%.cu
	@mkdir -p $(@D)
	CCACHE_NOHASHDIR=1 $(CCACHE) $(NVCC) $(NVCCFLAGS) -c $< -o $@

# GPU benchmarks that call cuDNN themselves (no library): bench/X.cu -> $(BUILD)/cuda/bench/X,
# built by cuda-build only.
GPU_BENCH_SRC := $(sort $(wildcard bench/*.cu))
GPU_BENCH_BIN := $(GPU_BENCH_SRC:bench/%.cu=$(BUILD)/cuda/bench/%)
$(GPU_BENCH_SRC:%.cu=$(BUILD)/obj/%.o): $(BUILD)/obj/%.o: %.cu
	@mkdir -p $(@D)
	CCACHE_NOHASHDIR=1 $(CCACHE) $(NVCC) $(NVCCFLAGS) -c $< -o $@
$(GPU_BENCH_BIN): $(BUILD)/cuda/bench/%: $(BUILD)/obj/bench/%.o
	@mkdir -p $(@D)
	$(CXX) $< -L$(CUDA_LIBDIR) -Wl,-rpath,$(CUDA_LIBDIR) -lcudnn -lcudart -o $@

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

# Phony: make follows the link to decide whether it is up to date, so a link left pointing into
# another build folder (make DEBUG=1 apps) would otherwise stay.
.PHONY: $(APPS)
$(APPS): %: $(OUT)/bin/%
	ln -sfn $< $@

# The CUDA build's programs without re-pointing ./train: what `make test` compiles and links
# when nvcc is present, so CI proves the GPU build (apps, tests, benchmarks, data tools) even
# on a machine without a GPU.
cuda-build:
	$(MAKE) --no-print-directory CUDA=1 $(BUILD)/cuda/tests/unit_tests $(BUILD)/cuda/tests/mpi_tests \
	  $(APPS_SRC:src/apps/%.cpp=$(BUILD)/cuda/bin/%) $(BENCH_SRC:bench/%.cpp=$(BUILD)/cuda/bench/%) \
	  $(TOOLS_SRC:data_tools/%.cpp=$(BUILD)/cuda/bin/%) $(GPU_BENCH_BIN)

clean:
	rm -rf build

include mk/fuzz.mk mk/deps.mk mk/test.mk mk/demo.mk

-include $(GPU_BENCH_SRC:%.cu=$(BUILD)/obj/%.d) $(F64_OBJ:.o=.d) $(F64_TEST_OBJ:.o=.d) $(CU_OBJ:.o=.d) $(BUILD)/obj/src/core/gpu_absent.d $(BUILD)/obj/src/dist/nccl_absent.d $(APPS_SRC:%.cpp=$(BUILD)/obj/%.d) $(LIB_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(MPI_TEST_OBJ:.o=.d) $(BENCH_SRC:%.cpp=$(BUILD)/obj/%.d) $(TOOLS_SRC:%.cpp=$(BUILD)/obj/%.d)
