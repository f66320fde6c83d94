// Package chaos is cle's fault-injection suite. It runs a real etcd and
// kube-apiserver (native mode, the built-in election controller idled), the
// cle-controller binary and three examples/candidate processes, injects
// faults chosen by a seeded random generator (killing, freezing and stopping
// the leader, restarting or freezing kube-apiserver, killing the controller,
// restarting etcd), and checks the election's invariants all along:
//
//   - a witness, an HTTP service that the leaders write to with their fencing
//     tokens, never sees two terms act at once, nor a term's write after the
//     Lease was seen naming a newer term's holder;
//   - the Lease's leaseTransitions grows on every change of holder;
//   - after each fault the best live candidate holds the Lease and acts
//     within the lease duration and a slack;
//   - no process panics, and the controller's goroutines and memory stay
//     bounded.
//
// The short run (the default, part of the integration tests) injects every
// kind of fault once. CHAOS_DURATION=30m keeps injecting until that much time
// has passed; CHAOS_SEED replays a run; CHAOS_SLACK changes the slack of the
// recovery bound (default 1s). `make chaos DURATION=30m SEED=42` runs it.
package chaos
