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

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900

# The demo needs only the daemon, the CLI and the worker.
demo: configure
	@cmake --build $(BUILD) -j $(JOBS) --target soartuned soartune soartune-worker
	@bash scripts/demo.sh $(BUILD)

clean:
	rm -rf $(BUILD)
