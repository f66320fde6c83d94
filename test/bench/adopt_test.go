package bench

import (
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cle-dev/cle/test/integration/framework"
)

// Scenario 8 elects between two adopters: a client-go LeaderElector and a
// controller-runtime manager. On cle's side they are elected through
// pkg/lock and contrib/controller-runtime by cle-controller; on the peer's,
// with plain client-go leader election, which has no ranking. The better
// one (emulation 1.35, against 1.36) is the elector in even repetitions and
// the manager in odd ones, so that both hand over to each other.

// adopters returns the starters of the better and the worse adopter of
// st's repetition.
func adopters(r *run, st starter) (better, worse starter, betterID, worseID string) {
	kind := "lock"
	if st.side != "cle" {
		kind = "plain"
	}
	elector, manager := st, st
	elector.bin, elector.kind = r.candBin, kind
	manager.bin, manager.kind = r.mgrBin, kind
	if st.rep%2 == 1 {
		return manager, elector, "manager", "elector"
	}
	return elector, manager, "elector", "manager"
}

// adoptPair starts both adopters together and waits until one leads, and
// then for settle; it returns the group and the leader.
func adoptPair(r *run, st starter, lease string) (*group, string, bool) {
	better, worse, bid, wid := adopters(r, st)
	g := &group{st: st, lease: lease, r: r}
	g.startWith(better, lease+"-"+bid, "1.36.0", "1.35.0")
	g.startWith(worse, lease+"-"+wid, "1.36.0", "1.36.0")
	first, ok := st.j.waitStart(0, anyone)
	if !ok {
		return g, "", false
	}
	pause(settle)
	evs, _ := st.j.since(0)
	for id := range leaders(evs) {
		return g, id, true
	}
	return g, first.id, false
}

// adoptHandover: the leader of the pair stops gracefully.
func adoptHandover(r *run, st starter, lease string) []measure {
	return adoptStop(r, st, lease, syscall.SIGTERM)
}

// adoptStop stops the leader of the pair with sig.
func adoptStop(r *run, st starter, lease string, sig syscall.Signal) []measure {
	g, leader, ok := adoptPair(r, st, lease)
	defer g.stopAll()
	if !ok {
		return []measure{count("no settled leader within 90s", 1)}
	}
	return handOver(st, g, leader, sig)
}

// preemptionLimit is how long a better adopter is given to take over: a
// lease duration and two retry periods, after which an election that has
// not moved will not move (plain leader election never does).
const preemptionLimit = leaseDuration + 2*retryPeriod

// adoptPreemption: the worse adopter leads alone; the better one joins.
func adoptPreemption(r *run, st starter, lease string) []measure {
	better, worse, bid, wid := adopters(r, st)
	g := &group{st: st, lease: lease, r: r}
	defer g.stopAll()
	old := lease + "-" + wid
	g.startWith(worse, old, "1.36.0", "1.36.0")
	if _, ok := st.j.waitStart(0, anyone); !ok {
		return []measure{count("no leader within 90s", 1)}
	}
	pause(settle)
	from := st.j.len()
	begin := time.Now()
	id := lease + "-" + bid
	g.startWith(better, id, "1.36.0", "1.35.0")
	var took event
	if !st.j.wait(from, preemptionLimit, func(evs []event) bool {
		var ok bool
		took, ok = firstStart(evs, func(s string) bool { return s == id })
		return ok
	}) {
		return []measure{count(fmt.Sprintf("better did not lead within %s", preemptionLimit), 1), count("overlap", 0)}
	}
	evs, _ := st.j.since(from)
	ms := []measure{seconds("join → better starts", took.at.Sub(begin)), count(fmt.Sprintf("better did not lead within %s", preemptionLimit), 0)}
	stopped, ok := stopOf(evs, old)
	if !ok || took.at.Before(stopped.at) {
		return append(ms, count("overlap", 1))
	}
	return append(ms, seconds("leaderless gap", took.at.Sub(stopped.at)), count("overlap", 0))
}

// adoptFailover: the leader of the pair is SIGKILLed.
func adoptFailover(r *run, st starter, lease string) []measure {
	return adoptStop(r, st, lease, syscall.SIGKILL)
}

// Scenario 9: three kube-scheduler processes of the Kubernetes release the
// benchmark runs against (binary 1.N), emulating 1.N-2, 1.N-1 and 1.N-1,
// with the CoordinatedLeaderElection gate and client-go's default timings.
// kube-scheduler always elects on kube-system/kube-scheduler; each
// repetition deletes that Lease and the candidates before and after.
// A scheduler leads from when its elector logs that it acquired the Lease
// (its leader work starts right after).
func kubeSchedulers(r *run, st starter, lease string) []measure {
	const ns, name = metav1.NamespaceSystem, "kube-scheduler"
	clean := func() {
		client := r.server.Client()
		if err := client.CoordinationV1().Leases(ns).Delete(r.ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			r.b.Fatal(err)
		}
		if err := client.CoordinationV1beta1().LeaseCandidates(ns).DeleteCollection(r.ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			r.b.Fatal(err)
		}
	}
	clean()
	minor, err := framework.BinaryMinor("kube-scheduler")
	if err != nil {
		r.b.Fatal(err)
	}
	g := &group{st: st, lease: lease, r: r}
	defer clean()
	defer g.stopAll()
	best := fmt.Sprintf("%s-1.%d", lease, minor-2)
	begin := time.Now()
	for i, emulated := range []int{minor - 2, minor - 1, minor - 1} {
		id := fmt.Sprintf("%s-1.%d", lease, emulated)
		if i > 0 {
			id = fmt.Sprintf("%s-%d", id, i)
		}
		cmd := exec.Command(r.schedBin,
			"--kubeconfig="+st.kubeconfig, "--authentication-kubeconfig="+st.kubeconfig, "--authorization-kubeconfig="+st.kubeconfig,
			"--feature-gates=CoordinatedLeaderElection=true", fmt.Sprintf("--emulated-version=1.%d", emulated),
			"--leader-elect=true", "--leader-elect-lease-duration="+leaseDuration.String(),
			"--leader-elect-renew-deadline="+renewDeadline.String(), "--leader-elect-retry-period="+retryPeriod.String(),
			"--secure-port=0", "-v=2")
		c, err := st.launch(id, fmt.Sprintf("1.%d.0", emulated), cmd, true, schedulerEvent)
		if err != nil {
			r.b.Fatal(err)
		}
		g.cands = append(g.cands, c)
	}
	first, ok := st.j.waitStart(0, anyone)
	if !ok {
		return []measure{count("no leader within 90s", 1)}
	}
	wrong := 0
	if first.id != best {
		wrong = 1
	}
	right, ok := st.j.waitStart(0, func(id string) bool { return id == best })
	if !ok {
		return []measure{count("wrong first leader", wrong), count("the oldest never led within 90s", 1)}
	}
	ms := []measure{seconds("start → the oldest leads", right.at.Sub(begin)), count("wrong first leader", wrong)}
	pause(settle)
	from := st.j.len()
	kill := time.Now()
	g.byID(best).stop(syscall.SIGKILL)
	next, ok := st.j.waitStart(from, func(id string) bool { return id != best })
	if !ok {
		return append(ms, count("no successor within 90s", 1))
	}
	return append(ms, seconds("SIGKILL → next leader starts", next.at.Sub(kill)))
}

// schedulerEvent reads kube-scheduler's log: client-go's elector logs that
// it acquired the Lease just before it starts the leader work.
func schedulerEvent(line string) (event, bool) {
	if strings.Contains(strings.ToLower(line), "successfully acquired lease") {
		return event{what: "started-leading"}, true
	}
	return event{}, false
}
