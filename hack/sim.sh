#!/usr/bin/env bash
# Runs the deterministic simulation of elections (pkg/controller, TestSimulation):
# the controller's real code and pkg/candidate's own loops (a Candidate, or the
# External an adopter's modelled client-go elector drives through pkg/lock's
# rules), against a model API server, with
# faults, from one seed per schedule. It
# prints the seeds run, schedules and elections per second, elections, terms and the fault
# mix, its progress once a minute, and the FIRST that goes on where it ended (its runs
# of consecutive seed ranges add up to one run of them all; the elector simulation
# after it is not replayed exactly, and runs ELECTOR_SEEDS from FIRST each time); a
# failing seed prints its trace and the command that replays it.
#
#   SEEDS=N    run N seeds (default 10000)
#   BUDGET=D   run for D of wall-clock time instead (e.g. 60s, 2h); DURATION=D
#              says the same; with SEEDS too, whichever ends first
#   FIRST=S    start at seed S (default 1)
#   CHECKPOINT=F  keep the run's progress in file F: a run too long for one
#              sitting (SEEDS=1550000, some ten million elections) goes on
#              where the last one stopped when started again with the same F,
#              SEEDS counts the seeds of all sittings, and each sitting prints
#              the whole run's figures. Only the same code goes on with F.
#   SEED=S     replay seed S alone, printing its whole trace
#   ELECTOR_SEEDS=N  runs of the elector simulation that follows, and of its
#              shard groups (default 200 each)
#   COVER=0    leave out the coverage figures: by default both simulations'
#              binaries count which statements of cle's election code they
#              run, and the run ends with the share of each package's
#              statements reached (a build of those packages of its own, and
#              runs about a tenth slower)
set -o errexit -o nounset -o pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

args=(-sim.first="${FIRST:-1}")
if [[ -n "${SEED:-}" ]]; then
  args=(-sim.seed="${SEED}" -test.v)
else
  # SEEDS and BUDGET together: whichever ends first (a sitting of a long
  # CHECKPOINT run).
  if [[ -n "${BUDGET:-${DURATION:-}}" ]]; then
    args+=(-sim.budget="${BUDGET:-${DURATION}}")
  fi
  if [[ -n "${SEEDS:-}" || -z "${BUDGET:-${DURATION:-}}" ]]; then
    args+=(-sim.seeds="${SEEDS:-10000}")
  fi
fi
if [[ -n "${CHECKPOINT:-}" && -z "${SEED:-}" ]]; then
  args+=(-sim.checkpoint="$(realpath -m "${CHECKPOINT}")")
fi
# Schedules allocate briskly and keep little: collecting garbage less often
# runs more of them a second (GOGC=1600 ran 8% more than 400 on two cores, in
# 150 MB).
export GOGC="${GOGC:-1600}"
# A compiled test binary prints the figures even when the run passes (go test
# keeps a passing package's output to itself).
bin=$(mktemp -d)
trap 'rm -rf "${bin}"' EXIT
# -trimpath: the same code builds the same binary in any clone, which a
# CHECKPOINT run checks before it goes on. Built as make release builds
# (CGO_ENABLED=0 and cle_goflags of hack/lib/build-info.sh), it reuses the
# packages that build compiles: in any other configuration a cold run
# compiles every dependency once more (three and a half minutes on two
# cores).
source hack/lib/build-info.sh
export CGO_ENABLED=0
# The election code: what decides, renews, releases or guards a term, in the
# controller, the library, the adopters' lock, both API modes, the rules they
# share and cle-controller's own election of its active replica.
election_pkgs=(pkg/controller pkg/candidate pkg/lock pkg/access pkg/strategy pkg/shard internal/lead internal/lockrule internal/proof internal/stepped cmd/cle-controller/app)
cover=()
run_cover=()
if [[ "${COVER:-1}" == 1 && -z "${SEED:-}" ]]; then
  coverpkg=$(printf 'github.com/cle-dev/cle/%s,' "${election_pkgs[@]}")
  cover=(-cover -coverpkg="${coverpkg%,}")
  mkdir "${bin}/cover"
  run_cover=(-test.gocoverdir="${bin}/cover")
fi
# build_test PKG builds PKG's test binary into ${bin}; with the coverage
# flags, go test warns for every election package PKG does not import,
# which the figures at the end say once.
build_test() {
  go test -c "${cle_goflags[@]}" "${cover[@]}" -o "${bin}/$(basename "$1").test" "./$1" 2> >(grep -v '^warning: no packages being tested depend on' >&2)
}
build_test pkg/controller
# (The proof-of-death runs keep their termination message files in
# /dev/shm unless TMPDIR is set: see simTempDir.)
(cd pkg/controller && SIM_REPORT=1 "${bin}/controller.test" -test.run '^TestSimulation$' -test.timeout=0 "${run_cover[@]}" "${args[@]}")
# Each kind of run replays exactly, the fleet's too, which the race
# detector's run of the unit tests leaves out (a minute there, seconds here).
if [[ -z "${SEED:-}" && "${SIM_REPLAY:-1}" == 1 ]]; then
  (cd pkg/controller && "${bin}/controller.test" -test.run '^TestSimulationReplaysExactly$' "${run_cover[@]}")
fi
# Then client-go's real LeaderElector over the real Lock and library, and two
# replicas of the whole cle-controller process,
# in a synctest bubble's virtual time (internal/electorsim): ELECTOR_SEEDS runs
# (default 200), and as many of a shard group (the library's replicas of a
# group, assigned by the same two replicas).
if [[ -z "${SEED:-}" ]]; then
  build_test internal/electorsim
  (cd internal/electorsim && "${bin}/electorsim.test" -test.run '^TestReal(Electors|ShardGroups)UnderFaults$' -test.v -test.timeout=0 "${run_cover[@]}" \
    -elector-sim.seeds="${ELECTOR_SEEDS:-200}" -elector-sim.first="${FIRST:-1}") | grep -vE '^(=== (RUN|NAME)|    --- PASS|--- PASS|PASS$)'
fi
if [[ ${#run_cover[@]} -gt 0 ]]; then
  echo "Statements of the election code the simulations ran (docs/testing.md):"
  ran=$(go tool covdata percent -i="${bin}/cover" | sed -e 's|^\s*github.com/cle-dev/cle/||' -e 's|\s*coverage: | |')
  for pkg in "${election_pkgs[@]}"; do
    grep "^${pkg} " <<<"${ran}" || echo "${pkg} not run: nothing the simulations build imports it"
  done
  go tool covdata textfmt -i="${bin}/cover" -o="${bin}/cover.out"
  go tool cover -func="${bin}/cover.out" | awk '$1 == "total:" { print "all of the packages run: " $NF " of statements" }'
fi
