package candidate

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/cle-dev/cle/internal/nudge"
	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/shard"
	"github.com/cle-dev/cle/pkg/strategy"
)

// Defaults of Config. The three Lease timings are client-go's leader election
// defaults, so that a component switching to this library keeps its failover
// behaviour.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
	// DefaultCandidateRenewInterval is how often client-go's LeaseCandidate
	// renews itself (5 minutes), so that in steady state a candidate costs
	// next to no writes: 10,000 Leases with three candidates each write 100
	// LeaseCandidates a second, not thousands. Liveness at election time
	// does not rest on these renewals: the controller pings the contenders
	// that it has not seen renewed recently (cle-controller: within its 15s
	// freshness window; kube-apiserver's controller: within 5s), and a
	// candidate answers a ping at once from a watch of its own object, so an
	// election costs a round trip of milliseconds.
	DefaultCandidateRenewInterval = 5 * time.Minute
	// MaxCandidateRenewInterval bounds CandidateRenewInterval: a third of the
	// 30 minutes after which cle-controller (its default --candidate-ttl) and
	// kube-apiserver's controller delete a LeaseCandidate that has not been
	// renewed, so that a live candidate is never collected, even after two
	// failed renewals or with its clock somewhat behind the controller's.
	MaxCandidateRenewInterval = 10 * time.Minute
	// DefaultAPIMode lets the access layer pick the mode the server supports.
	DefaultAPIMode = "auto"
)

// Config configures a Candidate. It has the shape of client-go's
// LeaderElectionConfig; zero values take the defaults above.
type Config struct {
	// RestConfig is used to build the clients when Clients is not set. The
	// library's own requests are never write-guarded.
	RestConfig *rest.Config
	// Clients are ready API clients, an alternative to RestConfig.
	Clients access.Clients
	// access replaces the access layer that Run would detect from the
	// clients and APIMode; this module's tests and simulations inject one
	// with stepped.WithAccess. When set, RestConfig, Clients and APIMode are
	// ignored.
	access access.Interface
	// nudge steers the places where timing decides (package nudge); a
	// simulation sets it with stepped.WithNudge. Nil: never.
	nudge nudge.Hook
	// APIMode is "auto" (default), or an access.Mode to insist on one.
	APIMode string

	// Namespace holds the Lease and this process's LeaseCandidate.
	Namespace string
	// LeaseName is the Lease this process is a candidate for.
	LeaseName string
	// Identity names this process: it is the LeaseCandidate's name and the
	// Lease holderIdentity while it leads. A LeaseCandidate belongs to one
	// Lease, so the Identity must be unique among all the LeaseCandidates
	// of the namespace, not only among the Lease's: two components on one
	// host in one namespace (host-network static Pods in kube-system) must
	// not both use the host name. Empty: DefaultIdentity, the host name and
	// the Lease's name, which is unique per Lease on a host (add a random
	// suffix when two instances of one component can run on one host). It
	// is best stable across restarts of the same instance, so that a restart
	// refreshes its LeaseCandidate. A restarted process finding the Lease
	// still renewed under its name by its predecessor takes it only after
	// the Lease has stayed unchanged for a lease duration, or once a
	// controller names it again. Run returns ErrIdentityInUse when the
	// LeaseCandidate of this name is another Lease's.
	Identity string
	// BinaryVersion and EmulationVersion are this process's versions,
	// semantic versions such as "1.36.0" or "v1.36.0" (the LeaseCandidate
	// carries them without the "v", as the API requires); emulation
	// defaults to binary and may not be newer than it. Anything else is
	// refused: "1.36" (no patch), "dev", "latest".
	// A build without a release version should pass the version of the
	// release it is built from, with a pre-release suffix if it must
	// differ ("1.36.0-dev").
	BinaryVersion    string
	EmulationVersion string
	// Strategy is the election strategy this candidate asks for. Default
	// OldestEmulationVersion. On a cluster where kube-apiserver runs its own
	// election controller (the CoordinatedLeaderElection gate on), that
	// controller elects the Leases of OldestEmulationVersion;
	// strategy.OldestEmulationVersionByCleName asks for the same order
	// elected by cle-controller.
	Strategy coordinationv1.CoordinatedLeaseStrategy
	// Writer is the user name this process authenticates as. It is recorded
	// on the LeaseCandidate in the annotation access.WriterAnnotation, which
	// the admission policies of manifests/policies use to let only this user
	// write the candidate. Empty means: ask the server (a SelfSubjectReview,
	// which every authenticated user may create) when Run starts; with Access
	// set there is no client to ask, and the candidate goes unannotated
	// unless Writer is set. A server that cannot answer (before Kubernetes
	// 1.28) leaves the candidate unannotated too.
	Writer string

	// LeaseDuration is how long other parties wait, after they last saw the
	// Lease renewed, before they treat it as expired. It is written into the
	// Lease on every renewal, so a controller judges expiry by it. Whole
	// seconds; default 15s.
	LeaseDuration time.Duration
	// RenewDeadline is how long the leader keeps acting without a successful
	// renewal, measured from when the last successful renewal was sent. It
	// must be shorter than LeaseDuration: the difference is the margin by
	// which this process stops before anybody else may start. Default 10s.
	RenewDeadline time.Duration
	// RetryPeriod is the interval between renewals of the Lease, and between
	// retries of a failed write. Default 2s.
	RetryPeriod time.Duration
	// CandidateRenewInterval is how often the LeaseCandidate is renewed when
	// nobody pings it; pings are answered at once whatever it is. Default
	// 5m, as client-go's candidates; at most MaxCandidateRenewInterval.
	CandidateRenewInterval time.Duration

	// Callbacks are told about leadership changes.
	Callbacks Callbacks

	// ReleaseOnCancel makes Run hand over (to the preferred holder) or
	// release the Lease when its context is cancelled, so that the next
	// leader is elected at once instead of after the Lease expires. Nil means
	// true.
	ReleaseOnCancel *bool
	// DeleteCandidateOnExit makes Run delete this process's LeaseCandidate
	// when its context is cancelled, before releasing the Lease, so that the
	// controller does not elect this departing process again. Nil means true.
	DeleteCandidateOnExit *bool

	// Logger receives the candidate's logs. Zero: the logger of the context
	// Run is given (klog.FromContext), which is klog's unless the caller
	// put one there.
	Logger klog.Logger
	// Metrics, when set, is where the candidate registers its metrics:
	// cle_candidate_leading, cle_candidate_term,
	// cle_candidate_renewal_duration_seconds and
	// cle_candidate_guard_refusals_total, labelled with the Lease's namespace
	// and name. One candidate per Lease per registry.
	Metrics prometheus.Registerer

	// ProofOfDeath lets cle-controller (with --proof-of-death) elect the next
	// holder as soon as the kubelet reports this process's container
	// exited, instead of after the Lease expires (see ProofOfDeath). Nil:
	// DetectProofOfDeath, which finds it in a Pod and turns it off
	// elsewhere; NoProofOfDeath turns it off.
	ProofOfDeath *ProofOfDeath

	// Clock is the library's only time source. Default: real time.
	Clock clock.WithTicker
}

// Callbacks are called from goroutines of the library.
type Callbacks struct {
	// OnStartedLeading runs while this process leads. Its context is
	// cancelled when leadership ends, and the library waits for it to return
	// before the Lease can go to anybody else (handover or release), so it
	// must return promptly once ctx is done. TokenFrom(ctx) is the term's
	// fencing token. Required, but for an External candidate.
	OnStartedLeading func(ctx context.Context)
	// OnStoppedLeading is called after OnStartedLeading has returned, each
	// time leadership ends. Optional.
	OnStoppedLeading func()
	// OnNewLeader is called when the Lease is seen naming a new holder
	// (including this process). Calls may run concurrently. Optional.
	OnNewLeader func(identity string)
}

// ErrInvalidConfig is wrapped by every error New returns for a bad Config.
var ErrInvalidConfig = errors.New("invalid candidate config")

// The kinds of process a Config configures, for complete.
type configKind int

const (
	forCandidate configKind = iota // New
	forExternal                    // NewExternal
	forGroup                       // NewGroup
)

// complete fills in defaults and validates, returning every problem at once
// (more are those a caller found), for the kind of process the Config
// configures.
func (c *Config) complete(kind configKind, more ...error) error {
	external := kind == forExternal
	if c.APIMode == "" {
		c.APIMode = DefaultAPIMode
	}
	if c.EmulationVersion == "" {
		c.EmulationVersion = c.BinaryVersion
	}
	c.BinaryVersion, c.EmulationVersion = withoutV(c.BinaryVersion), withoutV(c.EmulationVersion)
	if c.Strategy == "" {
		c.Strategy = coordinationv1.OldestEmulationVersion
		if kind == forGroup {
			c.Strategy = shard.StrategyShardsOldestEmulationVersion
		}
	}
	setDefault(&c.LeaseDuration, DefaultLeaseDuration)
	setDefault(&c.RenewDeadline, DefaultRenewDeadline)
	setDefault(&c.RetryPeriod, DefaultRetryPeriod)
	setDefault(&c.CandidateRenewInterval, DefaultCandidateRenewInterval)
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}

	errs := more
	switch {
	case c.access != nil:
	case c.RestConfig != nil && c.Clients.Kube != nil:
		errs = append(errs, errors.New("set RestConfig or Clients, not both"))
	case c.RestConfig == nil && c.Clients.Kube == nil:
		errs = append(errs, errors.New("one of RestConfig or Clients is required"))
	}
	if c.access == nil && c.APIMode != DefaultAPIMode {
		if _, err := access.ParseMode(c.APIMode); err != nil {
			errs = append(errs, fmt.Errorf("APIMode: %w", err))
		}
	}
	errs = append(errs, checkName("Namespace", c.Namespace, validation.IsDNS1123Label)...)
	errs = append(errs, checkName("LeaseName", c.LeaseName, validation.IsDNS1123Subdomain)...)
	if c.Identity == "" && c.LeaseName != "" {
		id, err := DefaultIdentity(c.LeaseName)
		if err != nil {
			errs = append(errs, fmt.Errorf("Identity is empty and no default: %w", err))
		}
		c.Identity = id
	}
	errs = append(errs, checkName("Identity", c.Identity, validation.IsDNS1123Subdomain)...)
	binary, err := parseVersion(c.BinaryVersion)
	if err != nil {
		errs = append(errs, fmt.Errorf("BinaryVersion: %w", err))
	}
	emulation, err2 := parseVersion(c.EmulationVersion)
	if err2 != nil {
		errs = append(errs, fmt.Errorf("EmulationVersion: %w", err2))
	}
	if err == nil && err2 == nil && binary.LessThan(emulation) {
		errs = append(errs, fmt.Errorf("EmulationVersion %s is newer than BinaryVersion %s", c.EmulationVersion, c.BinaryVersion))
	}
	if err := strategy.ValidateStrategyName(c.Strategy); err != nil {
		errs = append(errs, fmt.Errorf("Strategy: %w", err))
	} else if group := shard.IsStrategy(string(c.Strategy)); group != (kind == forGroup) {
		if group {
			errs = append(errs, fmt.Errorf("Strategy %q is a shard group's: join a group with NewGroup", c.Strategy))
		} else {
			errs = append(errs, fmt.Errorf("Strategy %q is not a shard group's: a group asks for %q or %q", c.Strategy, shard.StrategyShards, shard.StrategyShardsOldestEmulationVersion))
		}
	}
	if err := c.completeProofOfDeath(); err != nil {
		errs = append(errs, err)
	}

	for name, d := range map[string]time.Duration{
		"LeaseDuration": c.LeaseDuration, "RenewDeadline": c.RenewDeadline,
		"RetryPeriod": c.RetryPeriod, "CandidateRenewInterval": c.CandidateRenewInterval,
	} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %s", name, d))
		}
	}
	if c.LeaseDuration%time.Second != 0 {
		errs = append(errs, fmt.Errorf("LeaseDuration must be a whole number of seconds (the Lease stores seconds), got %s", c.LeaseDuration))
	}
	if c.RenewDeadline >= c.LeaseDuration {
		errs = append(errs, fmt.Errorf("RenewDeadline (%s) must be shorter than LeaseDuration (%s), or a stalled leader could still act when others see the Lease expired", c.RenewDeadline, c.LeaseDuration))
	}
	if c.CandidateRenewInterval > MaxCandidateRenewInterval {
		errs = append(errs, fmt.Errorf("CandidateRenewInterval (%s) must be at most %s, well inside the 30m after which controllers delete a LeaseCandidate not renewed", c.CandidateRenewInterval, MaxCandidateRenewInterval))
	}
	if c.RetryPeriod >= c.RenewDeadline {
		errs = append(errs, fmt.Errorf("RetryPeriod (%s) must be shorter than RenewDeadline (%s), or the leader cannot retry a failed renewal in time", c.RetryPeriod, c.RenewDeadline))
	}
	if c.Callbacks.OnStartedLeading == nil && kind == forCandidate {
		errs = append(errs, errors.New("Callbacks.OnStartedLeading is required"))
	}
	if external && c.RenewDeadline+c.RetryPeriod >= c.LeaseDuration {
		errs = append(errs, fmt.Errorf("for an External candidate, RenewDeadline + RetryPeriod (%s) must be shorter than LeaseDuration (%s): an external elector may lead for that long after its last renewal", c.RenewDeadline+c.RetryPeriod, c.LeaseDuration))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(errs...))
	}
	return nil
}

// DefaultIdentity is the Identity of a candidate that sets none: this
// host's name and the Lease's, as NameFor makes them a valid name
// ("node-1-kube-scheduler"). It is the same across restarts on one host, and
// differs between the Leases of components sharing the host.
func DefaultIdentity(leaseName string) (string, error) {
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("read the host name: %w", err)
	}
	return NameFor(host + "-" + leaseName), nil
}

// NameFor maps an identity to a valid LeaseCandidate name (a DNS-1123
// subdomain). A valid one is kept as it is. Any other, such as
// controller-runtime's and kube-controller-manager's default host_uuid, is
// lowercased, every run of other characters than letters and digits becomes
// a hyphen, and a hash of the original is appended, so that two identities
// that differ only in those characters stay distinct: "Node-1_6f1c..."
// becomes "node-1-6f1c...-1a2b3c4d".
func NameFor(id string) string {
	if id == "" || len(validation.IsDNS1123Subdomain(id)) == 0 {
		return id
	}
	var b strings.Builder
	hyphen := false
	for _, r := range strings.ToLower(id) {
		if ('a' <= r && r <= 'z') || ('0' <= r && r <= '9') {
			b.WriteRune(r)
			hyphen = false
		} else if !hyphen && b.Len() > 0 {
			b.WriteByte('-')
			hyphen = true
		}
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	suffix := fmt.Sprintf("%08x", h.Sum32())
	base := strings.TrimSuffix(b.String(), "-")
	if limit := validation.DNS1123SubdomainMaxLength - len(suffix) - 1; len(base) > limit {
		base = strings.TrimSuffix(base[:limit], "-")
	}
	if base == "" {
		return suffix
	}
	return base + "-" + suffix
}

func setDefault(d *time.Duration, def time.Duration) {
	if *d == 0 {
		*d = def
	}
}

func checkName(field, value string, check func(string) []string) []error {
	if value == "" {
		return []error{fmt.Errorf("%s is required", field)}
	}
	if msgs := check(value); len(msgs) > 0 {
		return []error{fmt.Errorf("%s %q is not a valid name: %s", field, value, strings.Join(msgs, "; "))}
	}
	return nil
}

// withoutV is a version as a LeaseCandidate carries it: "v1.36.0" without
// its "v". Anything else is left for parseVersion to judge.
func withoutV(s string) string {
	if len(s) > 1 && s[0] == 'v' && s[1] >= '0' && s[1] <= '9' {
		return s[1:]
	}
	return s
}

// parseVersion accepts what the API accepts in a LeaseCandidate: a strict
// semantic version (major.minor.patch, optionally with a pre-release and
// build suffix), with no surrounding space; withoutV has taken off a "v".
func parseVersion(s string) (*version.Version, error) {
	if s == "" {
		return nil, errors.New("is required")
	}
	const want = "a semantic version such as 1.36.0 or v1.36.0 (a build without a release version: the release it is built from, e.g. 1.36.0-dev)"
	if s[0] < '0' || s[0] > '9' || strings.TrimSpace(s) != s {
		return nil, fmt.Errorf("%q is not %s", s, want)
	}
	v, err := version.ParseSemantic(s)
	if err != nil {
		return nil, fmt.Errorf("%q is not %s: %w", s, want, err)
	}
	return v, nil
}

func boolOr(b *bool, def bool) bool {
	if b == nil {
		return def
	}
	return *b
}
