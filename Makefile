# pileup — two commands on a fresh Debian 12 machine:
#   make demo   sandbox + sysbench load + stacks → ./pileup-demo/
#   make test   style gate (rustfmt, unused dependencies, clippy -D warnings), then every test against real mariadbd sandboxes
# Both install what they need first (Debian packages via apt-get, Rust via rustup if absent).

SHELL := /bin/bash
CARGO ?= cargo
# command:Debian package — a command already on PATH (or in /usr/sbin), or a
# file already there (an absolute path), is not reinstalled. The
# metadata_lock_info plugin (watch names who holds a metadata lock with it)
# comes only with the full mariadb-server package. pileup's eBPF programs
# (the locks probe, passive stacks' task iterator) are built with clang and
# libbpf is linked against libelf and zlib. The watch
# tests put a server on an ext4 image without extents (mkfs.ext4, losetup).
# bench/digest measures each tool's CPU and peak memory with GNU time. The
# CLI tests render pileup's manual pages with man (man-db, which brings groff).
# The consumers test reads every JSON result with jq. The fleet's rules are
# checked and unit-tested with promtool, and run on a
# real Prometheus (both from Debian's prometheus package). pileup bench compares
# MariaDB with a throwaway PostgreSQL 15 cluster it starts (Debian's postgresql-15).
# The fleet tests run ClickHouse's queries with chDB, in a Python venv (python3-venv).
NEEDS := mariadbd:mariadb-server-core mariadb-install-db:mariadb-server-core mariadb:mariadb-client-core \
  /usr/lib/mysql/plugin/metadata_lock_info.so:mariadb-server \
  sysbench:sysbench dot:graphviz xmllint:libxml2-utils jq:jq gdb:gdb eu-stack:elfutils go:golang-go \
  hyperfine:hyperfine cc:build-essential xz:xz-utils debuginfod:debuginfod curl:curl setpriv:util-linux chromium:chromium tmux:tmux pt-stalk:percona-toolkit \
  mydumper:mydumper myloader:mydumper offcputime:libbpf-tools \
  clang:clang pkg-config:pkg-config /usr/include/libelf.h:libelf-dev /usr/include/zlib.h:zlib1g-dev \
  mkfs.ext4:e2fsprogs losetup:mount /usr/bin/time:time man:man-db openssl:openssl bpftool:bpftool \
  promtool:prometheus prometheus:prometheus prometheus-mysqld-exporter:prometheus-mysqld-exporter \
  /usr/lib/postgresql/15/bin/initdb:postgresql-15 /usr/lib/python3.11/ensurepip/__init__.py:python3-venv
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: deps toolchain demo demo-fleet test style deploy-check build bench soak clean install

# Where `make install` puts pileup, its manual and its shell completions
# (the places Debian's man, bash-completion, zsh and fish look under /usr/local).
PREFIX ?= /usr/local

deps:
	@missing=""; \
	for need in $(NEEDS); do cmd=$${need%%:*}; pkg=$${need#*:}; \
	  command -v $$cmd >/dev/null 2>&1 || [ -x /usr/sbin/$$cmd ] || { case $$cmd in /*) [ -e $$cmd ];; *) false;; esac; } || case " $$missing " in *" $$pkg "*) ;; *) missing="$$missing $$pkg";; esac; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  # No package may start a system service here (mariadb-server's would): \
	  # policy-rc.d refuses every start while installing, unless one exists. \
	  guard=""; if [ ! -e /usr/sbin/policy-rc.d ]; then \
	    printf '#!/bin/sh\nexit 101\n' | $(SUDO) tee /usr/sbin/policy-rc.d >/dev/null && $(SUDO) chmod +x /usr/sbin/policy-rc.d && guard=1; fi; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing >/dev/null; rc=$$?; \
	  $(SUDO) apt-get clean; # the downloaded packages: about a gigabyte the tests need for their disks \
	  [ -z "$$guard" ] || $(SUDO) rm -f /usr/sbin/policy-rc.d; \
	  [ $$rc = 0 ] || { echo "installing$$missing failed (apt-get exit $$rc)" >&2; exit $$rc; }; \
	fi
	@# VersityGW, the S3 server the shipping tests and `make demo-fleet` use.
	@command -v versitygw >/dev/null || [ -x "$$(go env GOPATH)/bin/versitygw" ] || { \
	  echo "installing VersityGW (go install, about 2 minutes)"; \
	  go install github.com/versity/versitygw/cmd/versitygw@v1.8.0 && \
	  go clean -cache; }  # its half a gigabyte of build cache is not kept
	@# chDB (ClickHouse's engine, embedded in Python) runs deploy/clickhouse's
	@# queries in the fleet tests, on the files pileup shipped.
	@"$$HOME/.cache/pileup/chdb-venv/bin/python" -c 'import chdb' 2>/dev/null || { \
	  echo "installing chDB 4.4.0 (a Python venv in ~/.cache/pileup, about 1 GB)"; \
	  /usr/bin/python3 -m venv "$$HOME/.cache/pileup/chdb-venv" && \
	  "$$HOME/.cache/pileup/chdb-venv/bin/pip" install -q --no-cache-dir chdb==4.4.0; }
	@command -v $(CARGO) >/dev/null || [ -x "$$HOME/.cargo/bin/cargo" ] || { \
	  echo "installing Rust (rustup, stable)"; \
	  curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal; }

# rustfmt and clippy: the style gate uses both, and the eBPF skeleton's
# generator runs rustfmt (rustup's minimal profile has a rustfmt that fails).
toolchain: deps
	@export PATH="$$HOME/.cargo/bin:$$PATH"; \
	  { $(CARGO) fmt --version && $(CARGO) clippy --version; } >/dev/null 2>&1 || rustup component add rustfmt clippy

build: toolchain
	PATH="$$HOME/.cargo/bin:$$PATH" $(CARGO) build --release --locked

install: build
	install -D -m 0755 target/release/pileup $(DESTDIR)$(PREFIX)/bin/pileup
	target/release/pileup manpages $(DESTDIR)$(PREFIX)/share/man/man1 >/dev/null
	install -d $(DESTDIR)$(PREFIX)/share/bash-completion/completions $(DESTDIR)$(PREFIX)/share/zsh/site-functions \
	  $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d
	target/release/pileup completions bash > $(DESTDIR)$(PREFIX)/share/bash-completion/completions/pileup
	target/release/pileup completions zsh > $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_pileup
	target/release/pileup completions fish > $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/pileup.fish
	@echo "installed $(DESTDIR)$(PREFIX)/bin/pileup, its manual (man pileup) and completions"

demo: build
	PATH="$$HOME/.cargo/bin:$$PATH" bash scripts/demo.sh ./pileup-demo

# Two sandboxes with pileup watch and mysqld_exporter, Prometheus with
# pileup's rules, an S3 store; a stall on one host ends in the alert, the
# capture in the store and a screenshot of the console.
demo-fleet: build
	PATH="$$HOME/.cargo/bin:$$PATH" bash scripts/demo-fleet.sh ./pileup-demo-fleet

# The style gate runs first: formatting (rustfmt.toml) and clippy with every
# warning an error, then every test. A test that cannot run here fails or is
# #[ignore]d with its reason; the ignored ones are listed at the end.
test: toolchain style deploy-check
	@# The memory tests attach syscall tracepoints, found through tracefs.
	@mountpoint -q /sys/kernel/tracing || $(SUDO) mount -t tracefs nodev /sys/kernel/tracing || \
	  echo "tracefs is not mounted and could not be: the memory tests will fail" >&2
	@# Every test to the end; a watch test that fails is run once more alone
	@# and listed as flaky when it passes then (scripts/cargo-test says why).
	@PATH="$$HOME/.cargo/bin:$$PATH" CARGO="$(CARGO)" bash scripts/cargo-test
	@# The soak's short form: four kills of each tool, checked (bench/soak runs the full one).
	@rm -f target/soak-short.jsonl; PATH="$$HOME/.cargo/bin:$$PATH" $(CARGO) run --locked -q -p pileup-bench-drivers --bin soak-bench -- \
	  --pileup target/debug/pileup --kills 36 --minutes 10 --record target/soak-short.jsonl

# The fleet's parts: Prometheus rules checked and unit-tested, the Grafana
# dashboards regenerated from their one source and checked against the
# dashboard schema (grafana-foundation-sdk, strict).
deploy-check: deps
	promtool check rules deploy/prometheus/pileup.rules.yml
	promtool test rules deploy/prometheus/tests/pileup.rules.test.yml
	cd deploy/grafana/gen && go run . -check ..

# cargo-machete refuses dependencies no code uses; only the gate needs it.
style: toolchain
	PATH="$$HOME/.cargo/bin:$$PATH" $(CARGO) fmt --all --check
	@export PATH="$$HOME/.cargo/bin:$$PATH"; \
	  command -v cargo-machete >/dev/null || $(CARGO) install cargo-machete --version 0.9.2 --locked; \
	  $(CARGO) machete
	PATH="$$HOME/.cargo/bin:$$PATH" $(CARGO) clippy --workspace --all-targets --locked -- -D warnings

bench: build
	bash bench/stacks

# pileup killed at random moments, 30 minutes a run, until 1,000 kills
# (resumed from bench/soak-record.jsonl); results in bench/last-soak.md.
soak: deps
	bash bench/soak

clean:
	$(CARGO) clean
	rm -rf pileup-demo
