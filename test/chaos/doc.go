// Package chaos is cle's fault-injection suite. It runs a real etcd and
// kube-apiserver (native mode, the built-in election controller idled), two
// cle-controller replicas (one active, one standing by) and five candidates
// of one Lease: three examples/candidate processes (the candidate library),
// an examples/lock-elector (client-go's LeaderElector on pkg/lock) and the
// controller-runtime example manager (cle's option), each behind its own TCP
// proxy to kube-apiserver, all but the manager on a clock seconds to minutes
// off the machine's. The adopters exit when they lose a term, as client-go
// and controller-runtime components do, and are restarted. It injects
// faults chosen by a seeded random generator:
//
//   - the leader killed (SIGKILL), stopped gracefully (SIGTERM), or frozen
//     (SIGSTOP) for longer than the lease duration;
//   - the leader killed (SIGKILL) in its "Pod": the candidates of the library
//     and on pkg/lock each have a Pod object and a termination message file
//     per run, cle-controller runs with --proof-of-death, and the test, as
//     the leader's kubelet, reports the exit at once, late (after the Lease
//     has run out), never, or has the Pod deleted with --force instead;
//   - latency, or a partition longer than the lease duration, between the
//     leader and kube-apiserver (the proxy holds the bytes and delivers them
//     late once it heals);
//   - the leader restarted with another clock offset (±10 s, ±10 min);
//   - the leader upgraded: restarted at a newer emulation version than every
//     other candidate, so that leadership goes round all of them and every
//     kind of program;
//   - kube-apiserver restarted on the same etcd, or frozen for longer than the
//     renew deadline; etcd restarted (the fault ends once kube-apiserver
//     serves Leases again, which can be seconds after its readyz passes);
//   - the active controller replica SIGKILLed mid-election (the moment the
//     Lease is let go), or frozen while the standby takes over and elects.
//
// Beside them runs a shard group: three examples/candidate --shards
// replicas over 8 shards, each behind its own proxy and on a clock of its
// own. Every fault strikes it too, and three more strike one of its
// replicas: SIGKILL (it comes back in a new epoch), SIGSTOP and a partition
// from kube-apiserver, each longer than the lease duration.
//
// It checks the election's invariants all along:
//
//   - a witness, an HTTP service that the leaders write to with their fencing
//     tokens, never sees two terms act at once (a write that got past its
//     sender's write guard after a newer term's first write did), nor accepts
//     a term's write after the Lease was seen naming a newer term's holder;
//     a write decided in time and delivered late (its sender was frozen) is
//     refused by its token and counted, not a violation;
//   - the Lease's leaseTransitions grows on every change of holder;
//   - after each fault the best live candidate holds the Lease and acts
//     within the lease duration and a slack (and, for an adopter, its
//     elector's poll: 2.2 times the RetryPeriod of Lock.Timings); an adopter
//     that lost its term and exited joins again when it is restarted, and
//     its bound counts from that start; restarted during the fault, while
//     the API could not serve it, it also has its start-up retry (its
//     RetryPeriod and 10% jitter) after the API serves again;
//   - each shard's owner writes to the witness with the shard and its
//     grant's token, fenced per shard as the Lease's leaders are; no write
//     gets past its guard after the group Lease was seen granting the shard
//     to another replica; a shard granted to another owner has a higher
//     token, and a shard's token never goes back; after each fault every
//     shard is acted on, spread evenly over the live replicas, within the
//     lease duration, a retry period and the slack;
//   - no process panics, and the controllers' goroutines and memory stay
//     bounded; in a long run, every candidate leads at some point.
//
// CHAOS_BESIDE_BUILTIN=1 runs the suite on a cluster as it is with the gate
// on: kube-apiserver's own election controller runs (not idled) and holds
// its lock, the candidates ask for cle.dev/OldestEmulationVersion, and the
// controller replicas take their locks in kube-system, so that cle-controller
// elects beside kube-apiserver's controller, which pings the candidates and
// writes their Lease's strategy, and takes its lock back after each
// kube-apiserver restart.
//
// The short run (the default, part of the integration tests) injects every
// kind of fault once. CHAOS_DURATION=30m keeps injecting until that much time
// has passed; CHAOS_SEED replays a run; CHAOS_SLACK changes the slack of the
// recovery bound (default 1s). `make chaos DURATION=30m SEED=42` runs it.
package chaos
