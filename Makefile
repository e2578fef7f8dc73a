# rdmapipe: build, test, demo and benchmark targets. `make help` lists them.
# On a fresh Debian/Ubuntu machine `make demo` and `make test` install what
# they need (apt packages as root, Go modules through the module proxy).

GO      ?= go
BIN     := bin
# make install PREFIX=... [DESTDIR=...]: binaries, man pages, completions.
PREFIX  ?= /usr/local
SHARE   := $(DESTDIR)$(PREFIX)/share
# Where the SoftRoCE VM keeps its kernel download and per-run files.
export RXE_WORK ?= $(CURDIR)/.cache/softroce

.PHONY: help deps build install install-dist dist test-dist test test-full test-unit test-fuzz fuzz test-rdma test-delay demo demo-rdma bench bench-broadcast bench-versions bench-ceiling bench-needs bench-latency bench-flood bench-ratelimit bench-cp clean

help:
	@echo "make demo       build, then stream 256 MiB through rdmasend -> rdmarecv on loopback"
	@echo "make test       vet, unit and race tests, end-to-end over TCP, a fuzz smoke, and one SoftRoCE VM boot with what only the VM proves (~15 min)"
	@echo "make test-full  the same with the whole VM suite (faults, the delay wire, every e2e and rdmacp test over rxe and siw) and FUZZTIME=1m"
	@echo "make test-unit  vet and the fast tests only (no VM)"
	@echo "make test-fuzz  every fuzz target for FUZZTIME each (default 5s; part of make test)"
	@echo "make fuzz       the same, keeping what it found in testdata/fuzz for make test to start from: FUZZTIME=10m make fuzz"
	@echo "make test-rdma  the SoftRoCE VM part of make test (SUITE=full: of make test-full), over rxe and soft-iWARP (needs root)"
	@echo "make test-delay 32 MiB streams over the VM's two-host rxe wire with 5, 20 and 50 ms netem delay each way, DELAY_RUNS times each (default 20)"
	@echo "make demo-rdma  the same demo over real verbs (rxe) inside the SoftRoCE VM (needs root)"
	@echo "make build      build every command (./cmd/...) into bin/"
	@echo "make install    build, then install the commands, their man pages and bash/zsh/fish completions under PREFIX (default /usr/local)"
	@echo "make dist       a .deb, an .rpm (binaries, man pages, completions) and a tarball of the binaries in dist/ (VERSION)"
	@echo "make test-dist  make dist, then install the .deb and the .rpm into scratch roots and run the installed commands (part of make test)"
	@echo "make bench-broadcast  rdmasend --to 3 receivers vs one, and vs 3 parallel senders: host TCP, then rdma in the SoftRoCE VM (SIZE, RUNS)"
	@echo "make bench-versions OLD=REV  rdma throughput of the commands built from REV against this checkout's, in one VM boot (SIZE, RUNS)"
	@echo "make bench-ceiling  each side's own ceiling without a network (BenchmarkCeiling), unkeyed, keyed and encrypted, at GOMAXPROCS 1..nproc, a markdown table with issue 18's and issue 34's ratios (COUNT, BENCHTIME, CPUS, PIN; part of make bench)"
	@echo "make bench-needs  each side's GB per CPU-second in each mode (file, pipe, /dev/null; O_DIRECT and cached file output; unkeyed, keyed, encrypted; a relay) and the cores it needs at 100, 200 and 400 Gb/s, a markdown table (COUNT, BENCHTIME)"
	@echo "make bench-latency  first byte and line latency over TCP loopback, rdmapipe (auto, tcp) vs nc, a markdown table (RUNS, LINES, GAP; part of make bench)"
	@echo "make bench-flood  a keyed stream under pre-auth connect floods vs without, over TCP loopback: issue 30's valid proposals that stall, issue 42's refused ones (another version, garbage, stall) from 1 and 200 sources, 1000 over 15 s and 60/s for 30 s: runs exact and the time ratio; and the receiver's peak RSS under 60,000 refused connections (RUNS, default 10; CASES; part of make bench)"
	@echo "make bench-ratelimit  rdmasend --limit-rate: achieved vs asked rate over TCP loopback, a markdown table (RATES, RUNS, SECONDS_PER_RUN; part of make bench)"
	@echo "make bench-cp   rdmacp vs scp and rsync -a through a private sshd on 127.0.0.1: one 1 GiB file, 20,000 files of 4 KiB, 2,000 of 1 MiB, a markdown table; then rdmacp -a -H -X -A vs rsync -aHAX, first and second copies, paired per round (RUNS, WORKLOADS, TOOLS, INCR_WORKLOADS, BEFORE_BIN; root; part of make bench)"
	@echo "make bench      benchmarks: host TCP vs socat/nc, SoftRoCE VM vs ib_send_bw/rcopy/socat (RUNS, SIZE, VM_SIZE; see bench/README.md)"

# deps installs the C libraries cgo links against, if missing, and fetches
# the Go modules.
deps:
	@./scripts/deps.sh
	@$(GO) mod download

# -buildvcs=auto stamps the VCS revision that --version prints (when built
# from a git checkout), whatever GOFLAGS says. urfave_cli_no_docs leaves
# urfave/cli's markdown man page generator (go-md2man, blackfriday) out of
# the commands: its package init cost every start ~0.3 ms, and --man has
# its own generator (internal/command/man.go). A plain `go build` or
# `go install` makes the same commands, only slower to start.
BUILDTAGS ?= urfave_cli_no_docs
build: deps
	$(GO) build -buildvcs=auto -tags '$(BUILDTAGS)' -o $(BIN)/ ./cmd/...

# install copies every command and, for each that can print them from its
# own flag definitions (--man, --completion SHELL), its man page and
# completion scripts.
install: build
	$(install-files)

# install-files is install's recipe, also dist's after its own build.
define install-files
	install -d $(DESTDIR)$(PREFIX)/bin $(SHARE)/man/man1 $(SHARE)/bash-completion/completions \
		$(SHARE)/zsh/site-functions $(SHARE)/fish/vendor_completions.d
	@set -e; for b in $(BIN)/*; do \
		n=$${b##*/}; \
		install -m 0755 $$b $(DESTDIR)$(PREFIX)/bin/$$n; \
		if $$b --man > $(BIN)/$$n.1.tmp 2>/dev/null; then \
			install -m 0644 $(BIN)/$$n.1.tmp $(SHARE)/man/man1/$$n.1; \
			$$b --completion bash > $(SHARE)/bash-completion/completions/$$n; \
			$$b --completion zsh > $(SHARE)/zsh/site-functions/_$$n; \
			$$b --completion fish > $(SHARE)/fish/vendor_completions.d/$$n.fish; \
			echo "installed $$n with its man page and completions"; \
		else \
			echo "installed $$n ($$n has no --man: no man page or completions)"; \
		fi; \
		rm -f $(BIN)/$$n.1.tmp; \
	done
endef

# dist packages what `make install PREFIX=/usr` installs (the binaries, man
# pages, bash/zsh/fish completions) as a .deb and an .rpm, with the files
# of packaging/ (the Debian copyright file, the lintian overrides) and
# LICENSE, and the binaries as a tarball, in DIST. Its binaries are built
# as a distribution builds them (dpkg-buildflags): position-independent,
# with full RELRO (-z relro -z now), stripped (-s -w), and the C of cgo
# with the stack protector and _FORTIFY_SOURCE. The packages are made by
# scripts/dist, a module of its own around the packaging library nfpm
# (github.com/goreleaser/nfpm/v2), so that nfpm and its dependencies stay
# out of go.mod and never link into the commands.
DIST        ?= dist
REVISION    := $(shell git rev-parse HEAD)
VERSION     ?= 0.0.0+git$(shell git log -1 --format=%cd.%h --date=format:%Y%m%d)
GOARCH      := $(shell $(GO) env GOARCH)
MAINTAINER  ?= rdmapipe maintainers <maintainers@users.noreply.a-seed-4ba5289b.example>
DIST_CFLAGS ?= -O2 -D_FORTIFY_SOURCE=2 -fstack-protector-strong -fstack-clash-protection -fcf-protection
DIST_LDFLAGS = -s -w -linkmode=external -extldflags '-Wl,-z,relro,-z,now'
dist: deps
	rm -rf $(DIST)
	mkdir -p $(DIST)
	CGO_CFLAGS='$(DIST_CFLAGS)' $(GO) build -buildvcs=auto -tags '$(BUILDTAGS)' -trimpath -buildmode=pie \
		-ldflags "$(DIST_LDFLAGS)" -o $(DIST)/bin/ ./cmd/...
	$(MAKE) --no-print-directory install-dist BIN=$(CURDIR)/$(DIST)/bin DESTDIR=$(CURDIR)/$(DIST)/stage PREFIX=/usr
	gzip -9n $(DIST)/stage/usr/share/man/man1/*.1
	cd scripts/dist && $(GO) run . -stage $(CURDIR)/$(DIST)/stage -packaging $(CURDIR)/packaging \
		-version '$(VERSION)' -arch $(GOARCH) -out $(CURDIR)/$(DIST) -license $(CURDIR)/LICENSE \
		-maintainer '$(MAINTAINER)' -revision $(REVISION) -date $(shell git log -1 --format=%cI)
	tar -czf $(DIST)/rdmapipe_$(VERSION)_linux_$(GOARCH).tar.gz -C $(DIST)/stage/usr bin
	rm -rf $(DIST)/stage $(DIST)/bin
	@ls -l $(DIST)

# install-dist is install without its build: dist's own binaries.
install-dist:
	$(install-files)

# test-dist checks the packages as a distribution would (lintian on the
# .deb, rpmlint on the .rpm: any error or warning fails it but those that
# packaging/lintian-overrides and packaging/rpmlint.toml justify), installs
# them into scratch roots (dpkg --root, rpm --root) and runs the installed
# commands (scripts/dist-test.sh).
test-dist: dist
	@./scripts/deps.sh rpm lintian rpmlint systemd
	./scripts/dist-test.sh $(DIST) LICENSE packaging

# Every test run from here fails, rather than skips, where a precondition it
# needs (root, a tool, a device) is missing (internal/testutil/skip.go).
export RDMAPIPE_STRICT := 1

test: test-unit test-fuzz test-dist test-rdma

# not run by CI: resolve an issue that touches the engine or a transport only
# after it passes too
test-full: test-unit
	$(MAKE) test-fuzz FUZZTIME=$${FUZZTIME:-1m}
	$(MAKE) test-rdma SUITE=full

# The tests that call t.Parallel wait on processes, ssh logins, timers and
# the network far more than on the CPU (those that do not, and those whose
# short timeouts must not fire under load, are left out of it): PARALLEL
# of them at a time in each package, where go test's default is the
# number of CPUs.
PARALLEL ?= 8
test-unit: deps
	$(GO) vet ./...
	$(GO) test -race -count=1 -parallel $(PARALLEL) ./...

# Bounded fuzzing of every decoder of peer bytes; failing inputs land in the
# packages' testdata/fuzz, and plain `go test` replays them from then on.
FUZZTIME ?= 5s
test-fuzz: deps
	FUZZTIME=$(FUZZTIME) ./scripts/fuzz.sh

# longer fuzzing that keeps what it found in testdata/fuzz (commit it)
fuzz: deps
	FUZZTIME=$(FUZZTIME) KEEP=1 ./scripts/fuzz.sh

SUITE ?= quick
test-rdma: build
	SUITE=$(SUITE) ./test/softroce/run-suite.sh

# not part of `make test` (test-rdma runs the same test once per delay)
DELAY_RUNS ?= 20
test-delay: build
	DELAY_RUNS=$(DELAY_RUNS) ./test/softroce/delay.sh

demo: build
	./scripts/demo.sh

# not part of `make test`: prints markdown tables and writes bench/results/latest.md
bench: build
	./bench/run.sh

# not part of `make test`: prints one markdown table per environment
bench-broadcast: build
	BENCH_BIN=$(BIN) ./bench/broadcast.sh
	VM_CPU=$${VM_CPU:-max,-erms,-fsrm} test/softroce/vm-run.sh bash -c 'BENCH_BIN=$(BIN) TRANSPORT=rdma ADDR=$$RXE_IP ./bench/broadcast.sh'

# not part of `make test`; also a section of `make bench` (host part):
# BenchmarkCeiling (pipe/ceiling_bench_test.go) at GOMAXPROCS 1..nproc, COUNT
# times each, as a markdown table with its targets; no VM, no root
bench-ceiling:
	GO=$(GO) ./bench/ceiling.sh

# not part of `make test`: each side's CPU per byte in each mode and the cores
# it needs at 100, 200 and 400 Gb/s (BenchmarkCeiling and BenchmarkEnds), as a
# markdown table; no VM, no root
bench-needs:
	GO=$(GO) ./bench/needs.sh

# not part of `make test`; also a section of `make bench` (host part): first byte
# and line latency over TCP loopback against nc, as a markdown table
bench-latency: build
	GO=$(GO) ./bench/latency.sh

# not part of `make test`; also a section of `make bench` (host part): a keyed
# stream under pre-auth connect floods against the same stream without them
bench-flood: build
	GO=$(GO) ./bench/flood.sh

# not part of `make test`; also a section of `make bench` (host part):
# rdmasend --limit-rate's achieved against asked rate over TCP loopback
bench-ratelimit: build
	./bench/ratelimit.sh
# not part of `make test`; also a section of `make bench` (host part, as root):
# rdmacp against scp and rsync -a through a private sshd, issue 34's workloads
bench-cp: build
	BENCH_BIN=$(BIN) ./bench/cp.sh

# not part of `make test`: OLD=REV is the revision to compare with
bench-versions: build
	./bench/versions.sh $(OLD)

demo-rdma: build
	test/softroce/vm-run.sh bash -c 'HOST=$$RXE_IP TRANSPORT=rdma SIZE=$${SIZE:-64M} ./scripts/demo.sh'

clean:
	rm -rf $(BIN) $(DIST) .cache
