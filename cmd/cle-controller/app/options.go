// Package app wires cle-controller: flags, clients, leader election of the
// controller itself, metrics and health endpoints, and signals.
package app

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	logsapi "k8s.io/component-base/logs/api/v1"

	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/controller"
)

// Options are cle-controller's command-line options.
type Options struct {
	Kubeconfig string
	APIMode    string
	Namespaces []string
	// ExcludeNamespaces are left out when Namespaces is empty.
	ExcludeNamespaces []string
	Workers           int
	KubeAPIQPS        float32
	KubeAPIBurst      int

	PingTimeout        time.Duration
	PingRate           float64
	PingBurst          int
	CandidateFreshness time.Duration
	CandidateTTL       time.Duration
	UnresponsiveTTL    time.Duration
	LeaseDuration      time.Duration
	ElectionGather     time.Duration
	UnsteadyWindow     time.Duration
	UnseenHolderWait   time.Duration
	// DeleteDepartedMembers deletes the member Leases of replicas that left
	// a shard group.
	DeleteDepartedMembers bool

	ProofOfDeath     bool
	PodNamespaces    []string
	PodLabelSelector string

	LeaderElect              bool
	LeaderElectLeaseDuration time.Duration
	LeaderElectRenewDeadline time.Duration
	LeaderElectRetryPeriod   time.Duration
	LeaderElectResourceName  string
	LeaderElectResourceNS    string
	LeaderElectIdentity      string
	MetricsBindAddress       string
	MetricsSecure            bool
	TLSCertFile              string
	TLSPrivateKeyFile        string
	HealthProbeBindAddress   string
	Profiling                bool
	ShutdownGracePeriod      time.Duration
	Version                  bool
	Logs                     *logsapi.LoggingConfiguration
}

// defaultLockNamespace holds the controller's own leader-election Lease,
// whose default name the access layer gives for the API mode.
const defaultLockNamespace = "kube-system"

// lockName is the name of the controller's own Lease: the one given by flag,
// or access.PortableControllerLock in either API mode.
func (o *Options) lockName() string {
	if o.LeaderElectResourceName != "" {
		return o.LeaderElectResourceName
	}
	return access.PortableControllerLock
}

// sharedLockName is, in native mode, the lock of the election controller
// built into kube-apiserver, which the replica holding the controller's own
// Lease contends for too: only while it holds that one as well does it elect
// the Leases of OldestEmulationVersion (see controller.Options.ElectsBuiltin).
// "" in portable mode, and when the controller's own Lease is that lock
// (--leader-elect-resource-name=leader-election-controller): the holder then
// elects every Lease.
func (o *Options) sharedLockName(mode access.Mode) string {
	if mode != access.ModeNative || o.lockName() == access.NativeControllerLock {
		return ""
	}
	return access.NativeControllerLock
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{
		APIMode:                  access.ModeAuto,
		ExcludeNamespaces:        []string{"kube-node-lease"},
		Workers:                  16,
		KubeAPIQPS:               300,
		KubeAPIBurst:             600,
		PingTimeout:              controller.DefaultPingTimeout,
		PingRate:                 controller.DefaultPingRate,
		PingBurst:                controller.DefaultPingBurst,
		CandidateFreshness:       controller.DefaultCandidateFreshness,
		CandidateTTL:             controller.DefaultCandidateTTL,
		UnresponsiveTTL:          controller.DefaultUnresponsiveCandidateTTL,
		LeaseDuration:            controller.DefaultLeaseDuration,
		ElectionGather:           controller.DefaultElectionGather,
		UnsteadyWindow:           controller.DefaultUnsteadyWindow,
		DeleteDepartedMembers:    true,
		LeaderElect:              true,
		LeaderElectLeaseDuration: 15 * time.Second,
		LeaderElectRenewDeadline: 10 * time.Second,
		LeaderElectRetryPeriod:   2 * time.Second,
		LeaderElectResourceNS:    defaultLockNamespace,
		MetricsBindAddress:       ":8443",
		MetricsSecure:            true,
		HealthProbeBindAddress:   ":8081",
		ShutdownGracePeriod:      2 * time.Second,
		Logs:                     logsapi.NewLoggingConfiguration(),
	}
}

// AddFlags registers the options on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Path to a kubeconfig. Empty: the in-cluster configuration.")
	fs.StringVar(&o.APIMode, "api-mode", o.APIMode, "API mode: native (coordination.k8s.io LeaseCandidates, v1beta1 or else v1alpha2, and Lease spec.strategy; needs the CoordinatedLeaderElection gate), portable (the leasecandidates.cle.dev CRD of manifests/crd and Lease annotations, any cluster), or auto (native when the server serves LeaseCandidates and keeps Lease spec.strategy, else portable). Until the mode can be used (e.g. the CRD is not installed yet) the controller says why and retries, up to once a minute, instead of exiting.")
	fs.StringSliceVar(&o.Namespaces, "namespaces", o.Namespaces, "Namespaces to elect in (comma-separated). Empty: all namespaces.")
	fs.StringSliceVar(&o.ExcludeNamespaces, "exclude-namespaces", o.ExcludeNamespaces, "Namespaces never watched when --namespaces is empty (comma-separated; the server filters them out). The default leaves out the node heartbeats of kube-node-lease, where every node renews a Lease every 10s and nothing is ever elected. Empty: watch every namespace.")
	fs.IntVar(&o.Workers, "workers", o.Workers, "Leases reconciled in parallel. An election step mostly waits for kube-apiserver, so this and --kube-api-qps bound how fast many Leases are elected: 16 workers at 40ms a write make 400 writes/s.")
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "Client-side rate limit on requests to kube-apiserver, per second. An election costs one write, so this bounds how fast many Leases are elected at once (a cold start, a node taking many holders with it): at 300/s, 10,000 Leases in about 35s. kube-apiserver's priority and fairness protects it from a burst; Events have a limit of their own.")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "Client-side burst of requests to kube-apiserver.")
	fs.DurationVar(&o.PingTimeout, "ping-timeout", o.PingTimeout, "How long a pinged candidate has to answer before it is excluded until it writes again.")
	fs.Float64Var(&o.PingRate, "ping-rate", o.PingRate, "Pings sent per second at most, across all Leases; pings for due elections go before those that only check a candidate better than a live holder. Keep it below --kube-api-qps so that Lease writes always have room.")
	fs.IntVar(&o.PingBurst, "ping-burst", o.PingBurst, "Pings that may be sent at once within --ping-rate.")
	fs.DurationVar(&o.CandidateFreshness, "candidate-freshness", o.CandidateFreshness, "How long after a candidate was seen created or renewed it counts as alive without a ping.")
	fs.DurationVar(&o.CandidateTTL, "candidate-ttl", o.CandidateTTL, "How long a candidate may go without renewing before it is ignored and deleted.")
	fs.DurationVar(&o.UnresponsiveTTL, "unresponsive-candidate-ttl", o.UnresponsiveTTL, "How long a candidate that did not answer a ping may go without renewing before it is deleted (twice the candidates' 5m renew interval by default; a live one creates it again at its next renewal).")
	fs.DurationVar(&o.LeaseDuration, "lease-duration", o.LeaseDuration, "leaseDurationSeconds of the Leases the controller creates (whole seconds).")
	fs.DurationVar(&o.UnseenHolderWait, "unseen-holder-wait", o.UnseenHolderWait, "How long a replica that starts waits before it names a holder of a Lease that does not exist, or exists empty, while candidates for it were there before it started: the holder of a Lease deleted just before may act until its own lease duration has run out. Set it to the longest lease duration your components use when that is longer than --lease-duration. 0: --lease-duration.")
	fs.DurationVar(&o.UnsteadyWindow, "unsteady-window", o.UnsteadyWindow, "A candidate that lost two terms within this window without releasing them (its Lease expired, or its process exited) is not preferred over a live holder until the older of those losses is this old: a stale priority, a candidate ranked first that keeps failing, does not take the Lease from a sound holder again and again. It is still elected when there is no live holder, and never kept from a holder that emulates a newer version than it does. 0 disables it.")
	fs.DurationVar(&o.ElectionGather, "election-gather", o.ElectionGather, "Before the first election of a Lease that has never had a holder, wait this long from the first candidate seen for others starting at the same time (closed early once no candidate has joined for a fifth of it; both longer by how late the controller's own writes of the last 10s showed in the Lease watch), so that the best of them leads first instead of a worse one leading until it is preempted. With it, a Lease that does not exist is created naming nobody, and its first holder named once the candidate watch shows every registration made before that creation. The price: a new Lease's very first election takes up to this long; vacant or expired Leases with a history are elected at once. 0 disables it.")
	fs.BoolVar(&o.DeleteDepartedMembers, "delete-departed-member-leases", o.DeleteDepartedMembers, "Delete the member Lease of a replica that left a shard group for good: it has no LeaseCandidate, its epoch has ended, the group names it for no shard, and another replica's member Lease records as high a token (needs delete on leases: see docs/security.md). false keeps them: a group whose replicas get new names (a Deployment's Pods) then collects one per replica ever started.")
	fs.BoolVar(&o.ProofOfDeath, "proof-of-death", o.ProofOfDeath, "Read the status of Pods (needs get, list and watch on pods: see docs/security.md) and elect the next holder as soon as the kubelet reports that the container of the holder's process has exited, instead of when its Lease expires. Only a report naming the very process instance that holds the term counts (candidates of pkg/candidate register theirs); a Pod deleted, a node NotReady or a status missing is no proof, and the Lease expires as without this flag.")
	fs.StringSliceVar(&o.PodNamespaces, "pod-namespaces", o.PodNamespaces, "With --proof-of-death, the namespaces whose Pods are read (comma-separated). Empty: those of --namespaces, or all.")
	fs.StringVar(&o.PodLabelSelector, "pod-label-selector", o.PodLabelSelector, "With --proof-of-death, read only the Pods that match this label selector (e.g. one label every candidate's Pod template carries), so that the watch sends only those. Empty: every Pod of --pod-namespaces; the controller keeps a few hundred bytes of each.")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "Elect one active replica of this controller before electing anything.")
	fs.DurationVar(&o.LeaderElectLeaseDuration, "leader-elect-lease-duration", o.LeaderElectLeaseDuration, "Lease duration of the controller's own leader election.")
	fs.DurationVar(&o.LeaderElectRenewDeadline, "leader-elect-renew-deadline", o.LeaderElectRenewDeadline, "How long the active replica keeps trying to renew before it stops acting.")
	fs.DurationVar(&o.LeaderElectRetryPeriod, "leader-elect-retry-period", o.LeaderElectRetryPeriod, "Interval between attempts to acquire or renew the controller's own Lease.")
	fs.StringVar(&o.LeaderElectResourceName, "leader-elect-resource-name", o.LeaderElectResourceName, "Name of the controller's own Lease. Empty: "+access.PortableControllerLock+". In native mode the replica that holds it contends for "+access.NativeControllerLock+" in the same namespace too, the lock of the election controller built into kube-apiserver: it elects the Leases of cle's own strategies (cle.dev/...) always, and those of OldestEmulationVersion only while it holds that lock as well, so that only one controller elects each Lease. "+access.NativeControllerLock+" here makes it the only lock: the replica elects every Lease while it holds it, and nothing otherwise.")
	fs.StringVar(&o.LeaderElectResourceNS, "leader-elect-resource-namespace", o.LeaderElectResourceNS, "Namespace of the controller's own Lease.")
	fs.StringVar(&o.LeaderElectIdentity, "leader-elect-identity", o.LeaderElectIdentity, "Identity in the controller's own Lease. Empty: hostname and a random suffix.")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", o.MetricsBindAddress, "Address serving Prometheus metrics on /metrics; 0 disables it.")
	fs.BoolVar(&o.MetricsSecure, "metrics-secure", o.MetricsSecure, "Serve the metrics address over HTTPS, to clients whose bearer token kube-apiserver authenticates (TokenReview) and authorizes to get the path (SubjectAccessReview, as for kube-apiserver's own /metrics: a ClusterRole with nonResourceURLs /metrics), as Kubernetes components serve theirs. false serves plain HTTP to anyone who reaches the address: only for a loopback address.")
	fs.StringVar(&o.TLSCertFile, "tls-cert-file", o.TLSCertFile, "Certificate (PEM, with intermediates) of the secure metrics address, read again when it changes. Empty: a self-signed certificate made at start.")
	fs.StringVar(&o.TLSPrivateKeyFile, "tls-private-key-file", o.TLSPrivateKeyFile, "Private key (PEM) of --tls-cert-file.")
	fs.BoolVar(&o.Profiling, "profiling", o.Profiling, "Serve Go's runtime profiles (net/http/pprof) under /debug/pprof/ on the secure metrics address, to clients authorized to get that path, as Kubernetes components do. Off by default: a CPU profile costs CPU while it runs, and the profiles tell whoever reads them about the process's internals.")
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", o.HealthProbeBindAddress, "Address serving /healthz and /readyz; 0 disables it.")
	fs.DurationVar(&o.ShutdownGracePeriod, "shutdown-grace-period", o.ShutdownGracePeriod, "How long shutdown may take after SIGTERM before the process exits anyway.")
	fs.BoolVar(&o.Version, "version", false, "Print the version and exit.")
	logsapi.AddFlags(o.Logs, fs)
}

// Validate checks the options together.
func (o *Options) Validate() error {
	var errs []error
	if o.APIMode != access.ModeAuto {
		if _, err := access.ParseMode(o.APIMode); err != nil {
			errs = append(errs, fmt.Errorf("--api-mode=%q: want %s, %s or %s", o.APIMode, access.ModeAuto, access.ModeNative, access.ModePortable))
		}
	}
	if o.Workers < 1 {
		errs = append(errs, fmt.Errorf("--workers=%d: want at least 1", o.Workers))
	}
	if o.KubeAPIQPS <= 0 || o.KubeAPIBurst < 1 {
		errs = append(errs, fmt.Errorf("--kube-api-qps and --kube-api-burst must be positive"))
	}
	for _, ns := range o.Namespaces {
		if strings.TrimSpace(ns) == "" {
			errs = append(errs, errors.New("--namespaces has an empty entry"))
		}
		if slices.Contains(o.ExcludeNamespaces, ns) {
			errs = append(errs, fmt.Errorf("namespace %q is both in --namespaces and in --exclude-namespaces", ns))
		}
	}
	for _, ns := range o.ExcludeNamespaces {
		if strings.TrimSpace(ns) == "" {
			errs = append(errs, errors.New("--exclude-namespaces has an empty entry"))
		}
	}
	if o.LeaderElect {
		if o.LeaderElectLeaseDuration <= o.LeaderElectRenewDeadline {
			errs = append(errs, fmt.Errorf("--leader-elect-lease-duration (%s) must be greater than --leader-elect-renew-deadline (%s)", o.LeaderElectLeaseDuration, o.LeaderElectRenewDeadline))
		}
		if o.LeaderElectRenewDeadline <= o.LeaderElectRetryPeriod {
			errs = append(errs, fmt.Errorf("--leader-elect-renew-deadline (%s) must be greater than --leader-elect-retry-period (%s)", o.LeaderElectRenewDeadline, o.LeaderElectRetryPeriod))
		}
		if o.LeaderElectResourceNS == "" {
			errs = append(errs, errors.New("--leader-elect-resource-namespace must not be empty"))
		}
	}
	if o.Profiling && (!serving(o.MetricsBindAddress) || !o.MetricsSecure) {
		errs = append(errs, errors.New("--profiling needs a secure --metrics-bind-address (--metrics-secure): the profiles are served there, to authorized clients only"))
	}
	if (o.TLSCertFile == "") != (o.TLSPrivateKeyFile == "") {
		errs = append(errs, errors.New("--tls-cert-file and --tls-private-key-file go together"))
	}
	if o.TLSCertFile != "" && !o.MetricsSecure {
		errs = append(errs, errors.New("--tls-cert-file needs --metrics-secure"))
	}
	if o.PingRate <= 0 || o.PingBurst < 1 {
		errs = append(errs, fmt.Errorf("--ping-rate (%v) must be positive and --ping-burst (%d) at least 1", o.PingRate, o.PingBurst))
	}
	if o.ShutdownGracePeriod <= 0 {
		errs = append(errs, fmt.Errorf("--shutdown-grace-period must be positive"))
	}
	for flag, d := range map[string]time.Duration{
		"--ping-timeout": o.PingTimeout, "--candidate-freshness": o.CandidateFreshness,
		"--candidate-ttl": o.CandidateTTL, "--lease-duration": o.LeaseDuration,
		"--unresponsive-candidate-ttl": o.UnresponsiveTTL,
	} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s=%s: must be positive", flag, d))
		}
	}
	if o.ElectionGather < 0 {
		errs = append(errs, fmt.Errorf("--election-gather=%s: must not be negative (0 disables it)", o.ElectionGather))
	}
	if o.UnsteadyWindow < 0 {
		errs = append(errs, fmt.Errorf("--unsteady-window=%s: must not be negative (0 disables it)", o.UnsteadyWindow))
	}
	if !o.ProofOfDeath && (len(o.PodNamespaces) > 0 || o.PodLabelSelector != "") {
		errs = append(errs, errors.New("--pod-namespaces and --pod-label-selector need --proof-of-death"))
	}
	for _, ns := range o.PodNamespaces {
		if strings.TrimSpace(ns) == "" {
			errs = append(errs, errors.New("--pod-namespaces has an empty entry"))
		}
	}
	if _, err := labels.Parse(o.PodLabelSelector); err != nil {
		errs = append(errs, fmt.Errorf("--pod-label-selector: %w", err))
	}
	if o.UnseenHolderWait < 0 {
		errs = append(errs, fmt.Errorf("--unseen-holder-wait=%s: must not be negative (0 takes --lease-duration)", o.UnseenHolderWait))
	}
	if len(errs) == 0 {
		// The combinations the controller itself checks: caught here, at
		// start-up, rather than when this replica first leads.
		if err := o.controllerOptions().Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// controllerOptions maps the flags onto the controller's options.
func (o *Options) controllerOptions() controller.Options {
	gather := o.ElectionGather
	if gather == 0 {
		gather = controller.NoElectionGather
	}
	unsteady := o.UnsteadyWindow
	if unsteady == 0 {
		unsteady = controller.NoUnsteadyWindow
	}
	return controller.Options{
		PingTimeout:              o.PingTimeout,
		PingRate:                 o.PingRate,
		PingBurst:                o.PingBurst,
		CandidateFreshness:       o.CandidateFreshness,
		CandidateTTL:             o.CandidateTTL,
		UnresponsiveCandidateTTL: o.UnresponsiveTTL,
		LeaseDuration:            o.LeaseDuration,
		ElectionGather:           gather,
		UnseenHolderWait:         o.UnseenHolderWait,
		UnsteadyWindow:           unsteady,
		KeepDepartedMembers:      !o.DeleteDepartedMembers,
		// Beside the controller's own lock, in the namespace it is given
		// rights to write in.
		TokenBound: types.NamespacedName{Namespace: o.LeaderElectResourceNS, Name: controller.DefaultTokenBoundName},
	}
}

// podNamespaces are the namespaces whose Pods the proof of death reads ("":
// all).
func (o *Options) podNamespaces() []string {
	switch {
	case len(o.PodNamespaces) > 0:
		return o.PodNamespaces
	case len(o.Namespaces) > 0:
		return o.Namespaces
	default:
		return []string{""}
	}
}

// watches reports whether the controller's informers see namespace ns.
func (o *Options) watches(ns string) bool {
	if len(o.Namespaces) > 0 {
		return slices.Contains(o.Namespaces, ns)
	}
	return !slices.Contains(o.ExcludeNamespaces, ns)
}
