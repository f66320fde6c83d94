package controller

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
)

// Metrics are the controller's Prometheus metrics. Register them with
// Metrics.Register; an unregistered set still works (tests read it directly).
type Metrics struct {
	Elections        *prometheus.CounterVec
	ElectionLatency  prometheus.Histogram
	LeaderChanges    prometheus.Counter
	Preemptions      prometheus.Counter
	Pings            prometheus.Counter
	PingsDeferred    prometheus.Counter
	PingBudget       prometheus.Gauge
	PingTimeouts     prometheus.Counter
	Probes           prometheus.Counter
	Conflicts        prometheus.Counter
	InvalidCandidate prometheus.Counter
	ExitsRead        prometheus.Counter
	HolderExits      prometheus.Counter
	Shards           *prometheus.GaugeVec
	ShardSpread      *prometheus.GaugeVec
	ShardMoves       *prometheus.CounterVec

	queue *queueMetrics
	// candidates reports, when scraped, the candidates of the controller
	// that currently uses these metrics, by state.
	candidates *stateGauge
	// leases reports, when scraped, the Leases with candidates: by the
	// state of their election, and one by one.
	leases *leaseCollector
}

const namespace = "cle"

// Election results, the "result" label of cle_elections_total.
const (
	resultCreated    = "created"     // a new Lease's first holder: created naming it, or opened and named
	resultElected    = "elected"     // a vacant or expired Lease was given to the winner
	resultNoEligible = "no_eligible" // candidates exist but none can lead
	resultError      = "error"       // the write failed; it is retried
)

// NewMetrics returns a new, unregistered set of metrics.
func NewMetrics() *Metrics {
	return &Metrics{
		Elections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "elections_total",
			Help: "Elections by result: created (a new Lease given its first holder), elected (vacant or expired Lease given a holder), no_eligible, error.",
		}, []string{"result"}),
		ElectionLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "election_duration_seconds",
			Help:    "Time from an election becoming needed (Lease missing, vacant or expired) to the winner being written.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		LeaderChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "leader_changes_total",
			Help: "Holder changes written by the controller.",
		}),
		Preemptions: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "preemptions_total",
			Help: "Times preferredHolder was set because a better candidate than the holder is alive.",
		}),
		Pings: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "pings_total",
			Help: "Pings written to candidates whose liveness was needed.",
		}),
		PingsDeferred: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "pings_deferred_total",
			Help: "Pings held back because the ping budget (--ping-rate) was spent; they are sent when it allows, elections first.",
		}),
		PingBudget: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "ping_budget",
			Help: "Pings per second the controller allows itself now: --ping-rate, or down to a tenth of it while the API server takes over a second to show the controller's writes.",
		}),
		PingTimeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "ping_timeouts_total",
			Help: "Pings not answered within the ping timeout; the candidate is excluded until it writes again.",
		}),
		Probes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "registration_probes_total",
			Help: "Pings written to prove the candidate watch has shown every registration made before a new Lease was created, before its first holder is named; one serves every Lease waiting.",
		}),
		Conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "strategy_conflicts_total",
			Help: "Times a Lease was found with candidates at the highest binary version asking for different strategies.",
		}),
		InvalidCandidate: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "invalid_candidates_total",
			Help: "Times a candidate was skipped because its strategy cannot rank it (e.g. a version that does not parse).",
		}),
		ExitsRead: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "process_exits_total",
			Help: "Exits of candidate processes read from the kubelet's reports of terminated containers (--proof-of-death).",
		}),
		HolderExits: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "holder_exits_total",
			Help: "Terms ended before their Lease expired because the kubelet reported the holder's process exited (--proof-of-death).",
		}),
		Shards: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "shards",
			Help: "Shards of each shard group (namespace/name) as last decided: owned, moving (its owner is asked to let go) or unowned.",
		}, []string{"group", "state"}),
		ShardSpread: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "shard_spread",
			Help: "Largest minus smallest number of shards a member of the group that may own holds, as last decided.",
		}, []string{"group"}),
		ShardMoves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "shard_moves_total",
			Help: "Shards taken from their owner: rebalance (a live owner asked to let go) or owner_ended (its epoch ended).",
		}, []string{"group", "reason"}),
		queue:  newQueueMetrics(),
		leases: newLeaseCollector(),
		candidates: &stateGauge{desc: prometheus.NewDesc("cle_candidates",
			"Candidates by the state the controller judges them in: alive, pinged, unresponsive, unknown (not renewed recently and not pinged), "+
				"expired (past the candidate TTL, or the unresponsive TTL, and not deleted yet: garbage the collector has not removed).",
			[]string{"state"}, nil)},
	}
}

// Register registers every metric, including the workqueue's, with r.
func (m *Metrics) Register(r prometheus.Registerer) error {
	cs := []prometheus.Collector{m.Elections, m.ElectionLatency, m.LeaderChanges, m.Preemptions, m.Pings, m.PingsDeferred, m.PingBudget, m.PingTimeouts, m.Probes, m.Conflicts, m.InvalidCandidate, m.ExitsRead, m.HolderExits, m.Shards, m.ShardSpread, m.ShardMoves}
	cs = append(cs, m.queue.collectors()...)
	cs = append(cs, m.candidates, m.leases)
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// queueMetrics implements workqueue.MetricsProvider on Prometheus, with the
// queue name as a label, like the metrics of Kubernetes' own controllers.
type queueMetrics struct {
	depthV                  *prometheus.GaugeVec
	addsV, retriesV         *prometheus.CounterVec
	latencyV, workDurationV *prometheus.HistogramVec
	unfinishedV, longestV   *prometheus.GaugeVec
}

func newQueueMetrics() *queueMetrics {
	labels := []string{"name"}
	buckets := prometheus.ExponentialBuckets(1e-6, 10, 10)
	return &queueMetrics{
		depthV:        prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "workqueue", Name: "depth", Help: "Current depth of the workqueue: cle_election (Leases to reconcile) or cle_candidate_gc (candidates to collect)."}, labels),
		addsV:         prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "workqueue", Name: "adds_total", Help: "Adds handled by the workqueue."}, labels),
		latencyV:      prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "workqueue", Name: "queue_duration_seconds", Help: "Seconds an item stays in the workqueue before being requested.", Buckets: buckets}, labels),
		workDurationV: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "workqueue", Name: "work_duration_seconds", Help: "Seconds processing an item from the workqueue takes.", Buckets: buckets}, labels),
		unfinishedV:   prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "workqueue", Name: "unfinished_work_seconds", Help: "Seconds of work in progress not yet observed by work_duration."}, labels),
		longestV:      prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "workqueue", Name: "longest_running_processor_seconds", Help: "Seconds the longest running processor has been running."}, labels),
		retriesV:      prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "workqueue", Name: "retries_total", Help: "Retries handled by the workqueue."}, labels),
	}
}

func (q *queueMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{q.depthV, q.addsV, q.latencyV, q.workDurationV, q.unfinishedV, q.longestV, q.retriesV}
}

func (q *queueMetrics) NewDepthMetric(name string) workqueue.GaugeMetric {
	return q.depthV.WithLabelValues(name)
}
func (q *queueMetrics) NewAddsMetric(name string) workqueue.CounterMetric {
	return q.addsV.WithLabelValues(name)
}
func (q *queueMetrics) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return q.latencyV.WithLabelValues(name)
}
func (q *queueMetrics) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return q.workDurationV.WithLabelValues(name)
}
func (q *queueMetrics) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return q.unfinishedV.WithLabelValues(name)
}
func (q *queueMetrics) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return q.longestV.WithLabelValues(name)
}
func (q *queueMetrics) NewRetriesMetric(name string) workqueue.CounterMetric {
	return q.retriesV.WithLabelValues(name)
}

// stateGauge reports, when scraped, how many objects the controller
// currently judges to be in each state. A controller built for a new
// leadership term takes the source over.
type stateGauge struct {
	desc   *prometheus.Desc
	source atomic.Pointer[func() map[string]int]
}

func (c *stateGauge) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *stateGauge) Collect(ch chan<- prometheus.Metric) {
	source := c.source.Load()
	if source == nil {
		return
	}
	for state, n := range (*source)() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), state)
	}
}

// The states of a Lease's election, in cle_leases and cle_lease_state.
const leaseStatesHelp = "optimal (a live holder no candidate beats on merit), " +
	"preempting (a live candidate beats the holder on merit; preferredHolder names it), vacant (no Lease or no holder), " +
	"expired (the holder stopped renewing), conflict (candidates disagree on the strategy, or none has a valid binaryVersion), " +
	"unmanaged (held by a non-candidate, or a strategy this controller does not run or leaves to kube-apiserver's election controller)."

// leaseReport is one Lease with candidates, as the controller last judged
// it.
type leaseReport struct {
	key           types.NamespacedName
	state         leaseState
	leaderless    bool
	leaderlessFor time.Duration
	leaseDuration time.Duration
	holderNewer   bool
}

// leaseCollector reports, when scraped, the Leases of the controller that
// currently uses these metrics: how many are in each state, and one series
// per Lease with candidates (cle_lease_state), plus series only for Leases
// in trouble: without a leader, or led by a newer version than a live
// candidate. A controller built for a new leadership term takes the source
// over.
type leaseCollector struct {
	source                                    atomic.Pointer[func() []leaseReport]
	count, state, leaderless, duration, newer *prometheus.Desc
}

func newLeaseCollector() *leaseCollector {
	perLease := []string{"namespace", "lease"}
	return &leaseCollector{
		count: prometheus.NewDesc("cle_leases", "Leases with candidates by the state of their election as last judged: "+leaseStatesHelp,
			[]string{"state"}, nil),
		state: prometheus.NewDesc("cle_lease_state", "1 for each Lease with candidates, labelled with the state of its election as last judged: "+leaseStatesHelp,
			append(perLease, "state"), nil),
		leaderless: prometheus.NewDesc("cle_lease_leaderless_seconds",
			"How long a Lease with candidates has had no holder that renews it: vacant, expired, or held by a holder the controller named that has not renewed it yet; only such Leases have this series.",
			perLease, nil),
		duration: prometheus.NewDesc("cle_lease_duration_seconds",
			"The lease duration of a Lease that has this series in cle_lease_leaderless_seconds: an election taking longer than it has failed.",
			perLease, nil),
		newer: prometheus.NewDesc("cle_lease_holder_newer_than_candidate",
			"1 while a Lease of the OldestEmulationVersion strategy (or cle.dev/OldestEmulationVersion) is held by a candidate that emulates a newer version than a live candidate (one neither expired nor silent to a ping); only such Leases have this series.",
			perLease, nil),
	}
}

func (c *leaseCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.count, c.state, c.leaderless, c.duration, c.newer} {
		ch <- d
	}
}

func (c *leaseCollector) Collect(ch chan<- prometheus.Metric) {
	source := c.source.Load()
	if source == nil {
		return
	}
	counts := map[leaseState]int{leaseOptimal: 0, leasePreempting: 0, leaseVacant: 0, leaseExpired: 0, leaseConflict: 0, leaseUnmanaged: 0}
	for _, r := range (*source)() {
		counts[r.state]++
		ns, name := r.key.Namespace, r.key.Name
		ch <- prometheus.MustNewConstMetric(c.state, prometheus.GaugeValue, 1, ns, name, string(r.state))
		if r.leaderless {
			ch <- prometheus.MustNewConstMetric(c.leaderless, prometheus.GaugeValue, r.leaderlessFor.Seconds(), ns, name)
			ch <- prometheus.MustNewConstMetric(c.duration, prometheus.GaugeValue, r.leaseDuration.Seconds(), ns, name)
		}
		if r.holderNewer {
			ch <- prometheus.MustNewConstMetric(c.newer, prometheus.GaugeValue, 1, ns, name)
		}
	}
	for state, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.count, prometheus.GaugeValue, float64(n), string(state))
	}
}
