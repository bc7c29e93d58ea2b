# Fuzzing (tests/fuzz/, tests/README.md): libFuzzer harnesses, one per parser of outside data,
# built with clang (libFuzzer is clang's) under ASan and UBSan into build/fuzz/fuzz_NAME. Only the
# parsers and what they call on the way (FUZZ_LIB_SRC) are compiled with clang, instrumented for
# coverage and the sanitizers, as objects of their own (the flags differ from g++'s); the rest
# (the model registry behind --model, the models behind a checkpoint) links from the g++ library
# $(LIB): the objects come first, so the library never supplies a second copy of them. A
# whole-library clang build would take 5-10 times as long. `make fuzz` runs each harness for
# FUZZ_SECONDS (tests/fuzz/run.sh); the working corpus grows in build/fuzz/corpus/NAME and
# anything found lands in build/fuzz/artifacts/NAME/.
FUZZ_CXX      ?= clang++
FUZZ_SECONDS  ?= 60
FUZZ_DIR      := build/fuzz
# tests/fuzz/ubsan_ignore.txt: third-party code left unchecked, each entry with its reason.
FUZZ_SAN      := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer \
  -fsanitize-ignorelist=tests/fuzz/ubsan_ignore.txt
FUZZ_CXXFLAGS := -std=c++20 -O1 -g -march=$(CPU_ARCH) -Wall -Wextra -Wno-unknown-warning-option -MMD -MP \
  -fdebug-prefix-map=$(CURDIR)=. $(FUZZ_SAN)
FUZZ_SRC      := $(sort $(wildcard tests/fuzz/fuzz_*.cpp))
FUZZ_NAMES    := $(FUZZ_SRC:tests/fuzz/fuzz_%.cpp=%)
FUZZ_BIN      := $(FUZZ_NAMES:%=$(FUZZ_DIR)/fuzz_%)
FUZZ_LIB_SRC  := src/core/check.cpp src/core/cli.cpp src/core/gpu_absent.cpp src/data/idx.cpp \
  src/data/cifar.cpp src/data/csv_dataset.cpp src/data/image.cpp src/io/atomic_file.cpp \
  src/io/safetensors.cpp src/io/checkpoint.cpp src/io/trainer_record.cpp src/optim/schedule.cpp src/train/options.cpp \
  src/core/common_flags.cpp src/dist/nccl_absent.cpp src/data/shards.cpp
FUZZ_LIB_OBJ  := $(FUZZ_LIB_SRC:%.cpp=$(FUZZ_DIR)/obj/%.o)

.PHONY: fuzz fuzz-build
# ccache 4.7 does not hash the file -fsanitize-ignorelist names (a changed list would get the old
# objects): CCACHE_EXTRAFILES adds it.
$(FUZZ_DIR)/obj/%.o: %.cpp tests/fuzz/ubsan_ignore.txt
	@mkdir -p $(@D)
	CCACHE_EXTRAFILES=tests/fuzz/ubsan_ignore.txt $(CCACHE) $(FUZZ_CXX) $(CPPFLAGS) $(FUZZ_CXXFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

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

-include $(FUZZ_LIB_OBJ:.o=.d) $(FUZZ_SRC:%.cpp=$(FUZZ_DIR)/obj/%.d)
