// Package lead holds what a candidate decides. Next, RenewCall, TermCall,
// Renewal, LetGo and the token functions are pure functions of their
// arguments: what the candidate does next and what its writes of the Lease
// carry. Ownership (which versions of the Lease this process may take),
// SeenTerms (which terms it has seen) and Newest (which copy of the Lease is
// the newest it knows) are records, not functions: the library updates them
// as it observes and writes the Lease, under a lock of their own, and
// decides from what they hold. Nothing here reads a clock, starts a
// goroutine or calls the API, so the controller's simulation runs the same
// rules against its model API server as the candidate library (pkg/candidate)
// runs against the real one.
package lead
