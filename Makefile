# cle: coordinated leader election for Kubernetes.
.DEFAULT_GOAL := help
SHELL := /usr/bin/env bash

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n\nTargets:\n"} /^[a-zA-Z0-9_-]+:.*##/ {printf "  %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build the project's commands into bin/.
	hack/build.sh

.PHONY: test
test: test-unit test-integration ## Run the unit tests (with -race), the fuzz smoke run (make fuzz runs every target), then the integration tests.

.PHONY: test-unit
test-unit: ## Run the unit tests with -race and a short fuzz run.
	hack/test-unit.sh

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME each (default 10s), FuzzReconcile included, which make test leaves out (its instrumented build costs a cold machine about 9 CPU-minutes).
	FUZZTIME="$(FUZZTIME)" FUZZ_SKIP= hack/fuzz.sh

.PHONY: test-chart
test-chart: ## Lint and render the Helm chart charts/cle: its objects are the release bundles', its schema rejects bad values (part of make test-unit).
	hack/test-chart.sh

.PHONY: test-integration
test-integration: kube-bin ## Run the integration tests against a real kube-apiserver and etcd.
	hack/test-integration.sh

.PHONY: test-matrix
test-matrix: ## Run the integration suites against each supported Kubernetes minor release (not part of make test; VERSIONS="1.34 1.37" picks some).
	hack/test-matrix.sh

.PHONY: verify
verify: ## Check formatting, go vet and that go.mod/go.sum are tidy.
	hack/verify.sh

.PHONY: chaos
chaos: kube-bin ## Run the fault-injection suite and print its summary. DURATION=30m keeps injecting faults that long (default: each kind once); SEED replays a run.
	DURATION="$(DURATION)" SEED="$(SEED)" hack/chaos.sh

.PHONY: sim
sim: ## Run the deterministic simulation of elections and print its figures, then the elector simulation (client-go's real LeaderElector in virtual time, and shard groups; ELECTOR_SEEDS=N runs of each). SEEDS=N (default 10000) or BUDGET=60s (DURATION=2h alike), from seed FIRST=S (each run prints the FIRST that continues it); SEED=S replays one seed with its trace; CHECKPOINT=F keeps a long run's progress in F, to go on in a later sitting.
	SEEDS="$(SEEDS)" BUDGET="$(BUDGET)" DURATION="$(DURATION)" SEED="$(SEED)" FIRST="$(FIRST)" CHECKPOINT="$(CHECKPOINT)" hack/sim.sh

.PHONY: sim-knockouts
sim-knockouts: ## Take each fix in hack/knockouts out of a copy of the tree and show the simulation finds it (the first failing seed of each). KNOCKOUTS="a b", SEEDS=N.
	KNOCKOUTS="$(KNOCKOUTS)" SEEDS="$(SEEDS)" hack/sim-knockouts.sh

.PHONY: bench
bench: kube-bin ## Run the benchmarks: ranking, and every scenario of an election's life, cle and the built-in side by side, adopters and kube-scheduler included (writes docs/benchmarks.md). QUICK=1 runs each once; DIR keeps the logs.
	QUICK="$(QUICK)" REPS="$(REPS)" SCENARIOS="$(SCENARIOS)" DIR="$(DIR)" hack/bench.sh

.PHONY: bench-shards
bench-shards: kube-bin ## Run the shard benchmark: a cle shard group and Knative's buckets side by side (3 → 5 → 3 replicas, a crash, 32 shards; the steady write cost at 32 and 128), ~30 min (QUICK=1: ~8). Writes docs/benchmarks.md; DIR keeps the logs.
	QUICK="$(QUICK)" REPS="$(REPS)" DIR="$(DIR)" hack/bench-shards.sh

.PHONY: bench-scale
bench-scale: kube-bin ## Run the scale benchmark (1,000 and 10,000 Leases, ~20 min; not part of make test). ARGS passes flags.
	hack/bench-scale.sh $(ARGS)

.PHONY: image
image: ## Build the container image (cle-controller, kubectl-cle and the example candidate) into _output/image without a container runtime: cle.tar and an OCI layout, tagged with the version in VERSION, which the manifests name.
	hack/image.sh

.PHONY: release
release: ## Build a release into _output/release: the multi-platform image (OCI archive and layout, docker-load tarballs, SBOM), install bundles pinned by digest, kubectl-cle archives, a krew manifest, the Go modules in module proxy layout (goproxy/) and checksums.txt. VERSION=vX.Y.Z is required; PLATFORMS="linux/amd64" builds only those platforms (a release to test, not to publish) and type-checks the others (CROSSCHECK=0 leaves that to a CROSSCHECK=only run).
	VERSION="$(VERSION)" PLATFORMS="$(PLATFORMS)" CROSSCHECK="$(CROSSCHECK)" hack/release.sh

.PHONY: bench-node
bench-node: ## As root, after make release: the node test's crash failovers alone, the leader's container killed five times each way (SIGKILL, out of memory, panic; an elector on pkg/lock and a controller-runtime manager SIGKILLed), for cle with the proof of death and for kube-apiserver's controller with client-go's candidates; prints the medians.
	E2E_KILLS=5 GOTESTFLAGS="-run=TestProofOfDeathOnNode|TestBuiltinCrashFailoverOnNode -v" hack/e2e.sh

.PHONY: e2e
e2e: ## Run the node test as root: install the release in _output/release (make release) on a real node (kubelet, containerd, runc, CNI, kube-proxy) in namespaces it creates, and test it there.
	hack/e2e.sh

.PHONY: kube-bin
kube-bin: ## Build kube-apiserver, kube-scheduler, etcd and kubectl into the cache (once per version; CLE_KUBE_VERSION=1.35 picks a release).
	hack/kube-bin.sh >/dev/null

.PHONY: prepare
prepare: ## Download every Go module and build every tool binary the checks, tests and release use (the Kubernetes binaries, containerd, helm, krew, promtool) into the cache, in the order a test run needs them; as root, also the node test's packages. .ci/run starts it in the background.
	hack/prepare.sh

.PHONY: promtool
promtool: ## Build promtool into the cache (once per version pinned in hack/tools/prometheus); it checks manifests/monitoring.
	hack/promtool.sh >/dev/null

.PHONY: krew
krew: ## Build krew into the cache (once per version pinned in hack/tools/krew); make e2e installs kubectl cle with it, make verify checks plugins/cle.yaml.
	hack/krew.sh >/dev/null

.PHONY: run
run: ## Start a local control plane, cle-controller and three example candidates; print the kubectl commands that show the election (Ctrl-C stops all). Never touches another cluster.
	hack/run.sh

.PHONY: run-cluster
run-cluster: ## The same demonstration on the cluster of the current kubeconfig context, deployed from manifests/ (deleted on exit).
	hack/run.sh --cluster
