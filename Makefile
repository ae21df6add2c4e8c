# pileup — two commands on a fresh Debian 12 machine:
#   make demo   sandbox + sysbench load + stacks → ./pileup-demo/
#   make test   every test, against real mariadbd sandboxes
# Both install what they need first (Debian packages via apt-get, Rust via rustup if absent).

SHELL := /bin/bash
CARGO ?= cargo
DEB_PACKAGES := mariadb-server-core mariadb-client-core sysbench graphviz libxml2-utils gdb elfutils golang-go hyperfine build-essential pkg-config curl ca-certificates
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: deps demo test build bench clean

deps:
	@missing=""; \
	for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
	@command -v $(CARGO) >/dev/null || [ -x "$$HOME/.cargo/bin/cargo" ] || { \
	  echo "installing Rust (rustup, stable)"; \
	  curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal; }

build: deps
	PATH="$$HOME/.cargo/bin:$$PATH" $(CARGO) build --release --locked

demo: build
	PATH="$$HOME/.cargo/bin:$$PATH" bash scripts/demo.sh ./pileup-demo

test: deps
	PATH="$$HOME/.cargo/bin:$$PATH" $(CARGO) test --workspace --locked -- --test-threads=2

bench: build
	bash bench/stacks

clean:
	$(CARGO) clean
	rm -rf pileup-demo
