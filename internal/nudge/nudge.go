// Package nudge names the places in cle's code where timing or ordering
// decides which of several correct things the code does, so that a
// deterministic simulation can steer them (FoundationDB calls this BUGGIFY).
// At each point the code asks its Hook whether to take the branch the point
// describes: always one that production could take too (a write made
// early, a read the cache made unnecessary, a reply that comes late), never
// one that breaks a rule the code relies on. Rare branches then run in
// the simulation as often as common ones.
//
// A few points take no branch: the code asks there only so that the world
// may act at that moment (a simulation stops the process, as SIGSTOP or a
// long garbage collection would), and ignores the answer.
//
// A Hook belongs to one object (a candidate's Config, a controller's
// Options), not to the process, so that one simulated process's nudges
// cannot leak into another's. Production code holds a nil Hook: every
// point costs a nil check and takes the usual branch.
package nudge

// Point is a place in the code where a Hook may steer it. Each says in one
// line what taking it changes.
type Point uint8

const (
	// LeaderRenewsEarly: a leader's elector renews the Lease now, although
	// its next renewal is not due yet.
	LeaderRenewsEarly Point = iota
	// RenewConflictWaits: after a renewal's conflict the elector waits a
	// retry period instead of reading the Lease and trying once more (as
	// when that read fails).
	RenewConflictWaits
	// CandidateRenewsEarly: a registrar renews its LeaseCandidate now,
	// although the renewal is not due yet.
	CandidateRenewsEarly
	// PingAnsweredLate: a registrar leaves a ping it sees unanswered until
	// its next step, a retry period later (a busy process).
	PingAnsweredLate
	// PingDeferred: the controller holds a ping back as if its ping budget
	// were spent, and sends it when the budget would have room again.
	PingDeferred
	// WinnerConfirmed: before naming a holder, the controller reads the
	// winner's LeaseCandidate from the server although its cache sufficed.
	WinnerConfirmed
	// LookAgainSoon: the controller looks at a Lease again a millisecond
	// after an election step, as a change its informer delivered would
	// make it.
	LookAgainSoon
	// BeforeNaming takes no branch: the controller has raised the fencing
	// token bound for the holder it names and is about to ask again
	// whether it may write, then write; the world may stop it here.
	BeforeNaming

	// Points counts the points.
	Points
)

var names = [Points]string{
	LeaderRenewsEarly:    "leader-renews-early",
	RenewConflictWaits:   "renew-conflict-waits",
	CandidateRenewsEarly: "candidate-renews-early",
	PingAnsweredLate:     "ping-answered-late",
	PingDeferred:         "ping-deferred",
	WinnerConfirmed:      "winner-confirmed",
	LookAgainSoon:        "look-again-soon",
	BeforeNaming:         "before-naming",
}

func (p Point) String() string {
	if p < Points {
		return names[p]
	}
	return "unknown"
}

// Hook says, at a point, whether to take the branch the point describes.
// The nil Hook never does.
type Hook func(Point) bool

// At asks h at point p.
func (h Hook) At(p Point) bool { return h != nil && h(p) }
