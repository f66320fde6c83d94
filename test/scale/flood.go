package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// flood saturates the server on purpose: --flood-writers writers, each with
// one write in flight at all times (a closed loop), update Leases of their
// own in kube-node-lease, which cle-controller does not watch, as a
// cluster's other clients do when they outpace the server. However fast the
// machine, the writers keep the server's queue full while they run, so its
// writes, the fleet's and the controller's among them, wait behind theirs.
type flood struct {
	client  kubernetes.Interface
	writers int
	writes  atomic.Int64
	errors  atomic.Int64
	// began and ended are when the writers started and stopped.
	began, ended time.Time
}

// floodNamespace holds the flood's Leases: kube-node-lease, left out of the
// controller's watches by default, as node heartbeats are.
const floodNamespace = "kube-node-lease"

// newFlood makes the flood's client: unthrottled, so that only the server
// bounds it.
func newFlood(cfg *rest.Config, writers int) (*flood, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = -1, 0
	cfg.UserAgent = "cle-scale-flood"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &flood{client: client, writers: writers}, nil
}

// run writes until ctx is done or d has passed, and returns then.
func (fl *flood) run(ctx context.Context, d time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	fl.began = time.Now()
	var wg sync.WaitGroup
	for i := range fl.writers {
		wg.Go(func() { fl.write(ctx, fmt.Sprintf("cle-scale-flood-%d", i)) })
	}
	wg.Wait()
	fl.ended = time.Now()
}

// write keeps one write of Lease name in flight until ctx is done.
func (fl *flood) write(ctx context.Context, name string) {
	leases := fl.client.CoordinationV1().Leases(floodNamespace)
	lease, err := leases.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To[int32](40)},
	}, metav1.CreateOptions{})
	for ctx.Err() == nil {
		if err != nil {
			fl.errors.Add(1)
			if lease, err = leases.Get(ctx, name, metav1.GetOptions{}); err != nil {
				continue
			}
		}
		lease.Spec.RenewTime = ptr.To(metav1.NowMicro())
		lease, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
		if err == nil {
			fl.writes.Add(1)
		}
	}
}

// promptWrite is how long a write of the fleet takes at most, here, on a
// server that keeps up; the server has caught up once the fleet's writes
// have all been that prompt for promptWindow.
const (
	promptWrite  = 250 * time.Millisecond
	promptWindow = 5 * time.Second
)

// latencySummary is latencies.between's figures.
type latencySummary struct {
	n             int
	p50, p99, max time.Duration
}

func summarize(n int, p50, p99, longest time.Duration) latencySummary {
	return latencySummary{n: n, p50: p50, p99: p99, max: longest}
}

func (s latencySummary) String() string {
	if s.n == 0 {
		return "no writes"
	}
	return fmt.Sprintf("%d writes, median %s, p99 %s, longest %s", s.n, s.p50.Round(time.Millisecond), s.p99.Round(time.Millisecond), s.max.Round(time.Millisecond))
}

// latencies records how long writes took, from sending to the answer, and
// when each was answered.
type latencies struct {
	mu      sync.Mutex
	samples []latency
}

type latency struct {
	took     time.Duration
	answered time.Time
}

func (l *latencies) add(sent time.Time) {
	now := time.Now()
	l.mu.Lock()
	l.samples = append(l.samples, latency{took: now.Sub(sent), answered: now})
	l.mu.Unlock()
}

// between summarises the writes answered in [from, to): their count, median,
// 99th percentile and longest.
func (l *latencies) between(from, to time.Time) (n int, p50, p99, longest time.Duration) {
	l.mu.Lock()
	var took []time.Duration
	for _, s := range l.samples {
		if !s.answered.Before(from) && s.answered.Before(to) {
			took = append(took, s.took)
		}
	}
	l.mu.Unlock()
	if len(took) == 0 {
		return 0, 0, 0, 0
	}
	slices.Sort(took)
	at := func(q float64) time.Duration { return took[min(len(took)-1, int(q*float64(len(took))))] }
	return len(took), at(0.5), at(0.99), took[len(took)-1]
}

// promptAfter is when, after t, the server applies writes promptly again:
// the answer of the first write from which on, for window, every write
// answered took at most prompt (a write held in the server's queue since
// before counts, when it is answered). Zero if that never happened, or the
// writes recorded end before such a window does.
func (l *latencies) promptAfter(t time.Time, prompt, window time.Duration) time.Time {
	l.mu.Lock()
	samples := slices.Clone(l.samples)
	l.mu.Unlock()
	slices.SortFunc(samples, func(a, b latency) int { return a.answered.Compare(b.answered) })
	// nextSlow[i] is when the first slow write at i or after was answered.
	nextSlow := make([]time.Time, len(samples)+1)
	for i := len(samples) - 1; i >= 0; i-- {
		nextSlow[i] = nextSlow[i+1]
		if samples[i].took > prompt {
			nextSlow[i] = samples[i].answered
		}
	}
	last := time.Time{}
	if len(samples) > 0 {
		last = samples[len(samples)-1].answered
	}
	for i, s := range samples {
		if s.answered.Before(t) || s.took > prompt {
			continue
		}
		end := s.answered.Add(window)
		if last.Before(end) {
			return time.Time{} // not seen long enough
		}
		if next := nextSlow[i]; next.IsZero() || !next.Before(end) {
			return s.answered
		}
	}
	return time.Time{}
}
