// Package lead holds what a candidate decides, as pure functions: what it
// does next (Next), what its writes of the Lease carry (Renewal, LetGo and
// the fencing token), which versions of the Lease it may take (Ownership)
// which terms it has seen (SeenTerms) and which copy of the Lease is the
// newest it knows (Newest). The candidate library
// (pkg/candidate) performs these decisions against the API; the
// controller's simulation performs the same ones against its model API
// server. Nothing here reads a clock or calls the API.
package lead
