# Thin wrapper: `make demo` and `make test` install what is missing, build, then run.
BUILD ?= build
JOBS ?= $(shell nproc)
MAKEFLAGS += --no-print-directory

.PHONY: all deps configure build test demo clean
all: build

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release > /dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# Then a short run of every fuzz target (scripts/fuzz.sh, docs/FUZZING.md), in its own clang build directory.
test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900
	@FUZZ_BUILD=$(BUILD)-fuzz JOBS=$(JOBS) bash scripts/fuzz.sh smoke

# The demo needs only the daemon, the CLI and the worker.
demo: configure
	@cmake --build $(BUILD) -j $(JOBS) --target soartuned soartune soartune-worker
	@bash scripts/demo.sh $(BUILD)

clean:
	rm -rf $(BUILD)
