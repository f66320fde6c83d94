// Command lock-elector is a component built on client-go's LeaderElector that
// takes part in coordinated leader election by passing pkg/lock's resource
// lock instead of client-go's Lease lock, and changing nothing else. While it
// leads, it reports to a witness (--witness-url, see internal/witness)
// through a write-guarded HTTP client, every --witness-interval, with the
// term's fencing token. With --configmap it also keeps a ConfigMap current,
// one write at a time, with a client of its own that no guard covers, as an
// adopter's leader work may: kube-apiserver's fence (kubectl cle fence) is
// then what refuses the writes that outlive its term.
//
// Besides its logs (stderr), it prints one line per event to stdout:
//
//	started-leading identity=<id> token=<n>
//	stopped-leading identity=<id>
//	new-leader identity=<id> leader=<holder>
//	configmap-write identity=<id> seq=<n> err=<error or none>
//
// SIGINT or SIGTERM cancels the elector: leader work stops, and the lock
// hands the Lease over once it has returned (ReleaseOnCancel). A lost term
// ends the process with status 1, as client-go components do.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/klog/v2"

	"github.com/cle-dev/cle/internal/witness"
	"github.com/cle-dev/cle/pkg/candidate"
	"github.com/cle-dev/cle/pkg/lock"
)

type options struct {
	kubeconfig, apiMode, namespace, lease, identity string
	binaryVersion, emulationVersion, strategy       string
	leaseDuration, renewDeadline, retryPeriod       time.Duration
	witnessURL                                      string
	witnessInterval, clockOffset                    time.Duration
	terminationMessagePath, pod, container          string
	configMap, configMapKubeconfig                  string
	configMapInterval                               time.Duration
}

func main() {
	var o options
	fs := pflag.NewFlagSet("lock-elector", pflag.ContinueOnError)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "path to a kubeconfig (default: in-cluster, or $KUBECONFIG)")
	fs.StringVar(&o.apiMode, "api-mode", "auto", "auto, native or portable")
	fs.StringVar(&o.namespace, "namespace", "default", "namespace of the Lease")
	fs.StringVar(&o.lease, "lease", "", "name of the Lease (required)")
	fs.StringVar(&o.identity, "identity", "", "this process's identity (required)")
	fs.StringVar(&o.binaryVersion, "binary-version", "", "binary version, e.g. 1.36.0 (required)")
	fs.StringVar(&o.emulationVersion, "emulation-version", "", "emulation version (default: the binary version)")
	fs.StringVar(&o.strategy, "strategy", "OldestEmulationVersion", "election strategy this candidate asks for, e.g. cle.dev/OldestEmulationVersion where kube-apiserver's own election controller elects OldestEmulationVersion")
	fs.DurationVar(&o.leaseDuration, "lease-duration", 15*time.Second, "the candidate's lease duration")
	fs.DurationVar(&o.renewDeadline, "renew-deadline", 10*time.Second, "the candidate's renew deadline")
	fs.DurationVar(&o.retryPeriod, "retry-period", 2*time.Second, "the candidate's retry period (the elector's is the lock's, which may be shorter)")
	fs.StringVar(&o.witnessURL, "witness-url", "", "if set, the leader POSTs a fenced write to this URL every --witness-interval through a write-guarded HTTP client")
	fs.DurationVar(&o.witnessInterval, "witness-interval", 100*time.Millisecond, "interval of the leader's writes to --witness-url")
	fs.StringVar(&o.terminationMessagePath, "termination-message-path", "", "the termination message file the kubelet reports when this process's container exits (default: found in a Pod's mounts); with cle-controller's --proof-of-death the next leader is elected as soon as the kubelet reports this process exited")
	fs.StringVar(&o.pod, "pod", "", "namespace/name of the Pod this process runs in (required with --termination-message-path): its exit counts only as that Pod's kubelet reports it")
	fs.StringVar(&o.container, "container", "", "name of this process's container in the Pod (default: the container whose termination message file the kubelet mounted at --termination-message-path): its exit counts only as reported for that container")
	fs.StringVar(&o.configMap, "configmap", "", "if set, the leader writes this ConfigMap of --namespace every --configmap-interval (its identity, fencing token and a sequence number), one write at a time, with a client no write guard covers and requests that outlive the term (a fence at the API server refuses them once another leads)")
	fs.StringVar(&o.configMapKubeconfig, "configmap-kubeconfig", "", "the kubeconfig of the --configmap writes (default: --kubeconfig's)")
	fs.DurationVar(&o.configMapInterval, "configmap-interval", 50*time.Millisecond, "interval of the leader's --configmap writes")
	fs.DurationVar(&o.clockOffset, "clock-offset", 0, "run the candidate on a clock this far ahead of the machine's (negative: behind), as a machine with a skewed clock")
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlagSet(klogFlags)
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		klog.Background().Error(err, "lock-elector failed")
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	logger := klog.LoggerWithValues(klog.Background(), "identity", o.identity)
	ctx = klog.NewContext(ctx, logger)
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.kubeconfig
	restConfig, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	restConfig.UserAgent = "cle-example-lock-elector/" + o.identity
	clk := witness.OffsetClock{Offset: o.clockOffset}
	var proof *candidate.ProofOfDeath // found in a Pod's mounts
	if o.terminationMessagePath != "" {
		proof = &candidate.ProofOfDeath{TerminationMessagePath: o.terminationMessagePath, Pod: o.pod, Container: o.container}
	}
	lk, err := lock.New(lock.Config{Candidate: candidate.Config{
		RestConfig:       restConfig,
		APIMode:          o.apiMode,
		Namespace:        o.namespace,
		LeaseName:        o.lease,
		Identity:         o.identity,
		BinaryVersion:    o.binaryVersion,
		EmulationVersion: o.emulationVersion,
		Strategy:         coordinationv1.CoordinatedLeaseStrategy(o.strategy),
		LeaseDuration:    o.leaseDuration,
		RenewDeadline:    o.renewDeadline,
		RetryPeriod:      o.retryPeriod,
		Clock:            clk,
		ProofOfDeath:     proof,
	}})
	if err != nil {
		return err
	}
	var configMaps corev1client.ConfigMapInterface
	if o.configMap != "" {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		rules.ExplicitPath = cmp.Or(o.configMapKubeconfig, o.kubeconfig)
		cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
		if err != nil {
			return fmt.Errorf("load the kubeconfig of the ConfigMap writes: %w", err)
		}
		cfg.UserAgent = restConfig.UserAgent
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return fmt.Errorf("ConfigMap client: %w", err)
		}
		configMaps = cs.CoreV1().ConfigMaps(o.namespace)
	}
	var witnessClient *http.Client
	if o.witnessURL != "" {
		if witnessClient, err = witness.Client(o.witnessURL, clk, lk.Candidate().WrapConfig); err != nil {
			return fmt.Errorf("witness client: %w", err)
		}
	}
	id := lk.Identity()
	ld, rd, rp := lk.Timings()
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lk,
		LeaseDuration:   ld,
		RenewDeadline:   rd,
		RetryPeriod:     rp,
		ReleaseOnCancel: true,
		Name:            id,
		// Wrapped, so that the lock hands the Lease over once leader work
		// has returned.
		Callbacks: lk.Callbacks(leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				token, _ := lk.Candidate().Token()
				fmt.Printf("started-leading identity=%s token=%d\n", id, token)
				logger.Info("Leading", "token", token)
				if configMaps != nil {
					go writeConfigMap(ctx, configMaps, o.configMap, id, token, o.configMapInterval)
				}
				if witnessClient == nil {
					<-ctx.Done()
					return
				}
				witness.Report(ctx, witnessClient, o.witnessURL, witness.Write{Identity: id, Token: int64(token)}, o.witnessInterval, clk, func(seq int, err error) {
					if err != nil {
						logger.V(2).Info("Witness write failed", "token", token, "seq", seq, "err", err)
					}
				})
			},
			OnStoppedLeading: func() {
				fmt.Printf("stopped-leading identity=%s\n", id)
				logger.Info("Not leading any more")
			},
			OnNewLeader: func(leader string) {
				fmt.Printf("new-leader identity=%s leader=%s\n", id, leader)
			},
		}),
	})
	if err != nil {
		return err
	}
	// The lock's context ends as soon as this process's term does (the
	// controller prefers a better candidate): the elector stops leader
	// work and releases at once instead of at its renew deadline.
	electorCtx := lk.ElectorContext(ctx)
	le.Run(electorCtx)
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ld)
	defer cancel()
	closeErr := lk.Close(closeCtx)
	if ctx.Err() == nil {
		return errors.Join(fmt.Errorf("leader election lost: %w", cmp.Or(context.Cause(electorCtx), errors.New("the elector stopped"))), closeErr)
	}
	return closeErr
}

// writeConfigMap writes ConfigMap name every interval until ctx ends: the
// writer's identity, its term's token and a sequence number. Each write is
// sent only after the last one was answered, and is not tied to ctx, so one
// in flight when the term ends still reaches the API server, as the write of
// a client that ignores the term's context does.
func writeConfigMap(ctx context.Context, c corev1client.ConfigMapInterface, name, id string, token int32, interval time.Duration) {
	logger := klog.FromContext(ctx)
	for seq := 1; ctx.Err() == nil; seq++ {
		reqCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Data:       map[string]string{"writer": id, "token": strconv.Itoa(int(token)), "seq": strconv.Itoa(seq)},
		}
		_, err := c.Update(reqCtx, cm, metav1.UpdateOptions{})
		if apierrors.IsNotFound(err) {
			_, err = c.Create(reqCtx, cm, metav1.CreateOptions{})
		}
		cancel()
		fmt.Printf("configmap-write identity=%s seq=%d err=%v\n", id, seq, err)
		if err != nil {
			logger.Info("ConfigMap write failed", "configMap", name, "seq", seq, "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(interval):
		}
	}
}
