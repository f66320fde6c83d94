// Package app wires the kubectl-cle plugin: kubectl's connection flags,
// the subcommands and their flags. What it shows is computed in
// pkg/kubectlcle.
package app

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/controller"
	"github.com/cle-dev/cle/pkg/kubectlcle"
	"github.com/cle-dev/cle/pkg/strategy"
)

// Version is set at build time with -ldflags -X.
var Version = "dev"

// Options are the flags every subcommand shares.
type Options struct {
	ConfigFlags   *genericclioptions.ConfigFlags
	AllNamespaces bool
	Output        string
	APIMode       string
	CandidateTTL  time.Duration
	LeaseDuration time.Duration
	// Clock stamps watch lines and measures ages and expiry.
	Clock clock.WithDelayedExecution

	streams genericiooptions.IOStreams
}

// NewOptions returns the defaults.
func NewOptions(streams genericiooptions.IOStreams) *Options {
	return &Options{
		ConfigFlags:   genericclioptions.NewConfigFlags(true),
		APIMode:       access.ModeAuto,
		CandidateTTL:  controller.DefaultCandidateTTL,
		LeaseDuration: controller.DefaultLeaseDuration,
		Clock:         clock.RealClock{},
		streams:       streams,
	}
}

const statesHelp = `STATE is where the election of a Lease stands; the first that applies, in this order:
  conflict    the candidates at the highest binary version ask for different strategies:
              nobody is elected and nothing is written until they agree.
  unmanaged   cle-controller does not steer the Lease: no unexpired LeaseCandidate names it,
              or its candidates ask for a strategy cle does not handle (another controller
              owns it), or an unexpired holder is not one of its candidates (it cannot hand
              over, and keeps the Lease until it releases it or lets it expire).
  vacant      the Lease does not exist yet or names no holder: the controller names the best
              live candidate holder.
  expired     the holder has not renewed within leaseDurationSeconds (judged from renewTime
              on this machine's clock): the controller names the best live candidate holder.
  preempting  preferredHolder asks the holder to hand over, or a candidate better than the
              holder on merit exists (the controller sets preferredHolder once it knows it
              is alive).
  optimal     the holder is a candidate that no other candidate outranks on merit, and no
              handover is asked for. Candidates that would win only the tie-break (equal
              versions, created earlier or named lower) do not take over.

BEST is who the controller elects or keeps: the holder when no candidate outranks it on merit,
else the first candidate in the strategy's order (cle's pkg/strategy, as the controller ranks).
TERM is leaseTransitions, the fencing token. Candidates not renewed within --candidate-ttl are
expired and left out, as the controller does.`

// NewCommand returns the kubectl-cle command.
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	o := NewOptions(streams)
	return o.command()
}

func (o *Options) command() *cobra.Command {
	root := &cobra.Command{
		Use:         "kubectl-cle",
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl cle"},
		Short:       "Show coordinated leader elections: who holds each Lease, who should, and why",
		Long: `kubectl cle shows coordinated leader elections (KEP-4355) run by cle-controller, or by the
controller built into kube-apiserver, in either API mode: native (coordination.k8s.io/v1beta1
LeaseCandidates) or portable (leasecandidates.cle.dev and Lease annotations), chosen as
cle-controller chooses it (--api-mode).

` + statesHelp,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       Version,
	}
	root.SetOut(o.streams.Out)
	root.SetErr(o.streams.ErrOut)
	fs := root.PersistentFlags()
	o.ConfigFlags.AddFlags(fs)
	fs.StringVar(&o.APIMode, "api-mode", o.APIMode, "API mode: auto (as cle-controller: native when the server serves coordination.k8s.io LeaseCandidates (v1beta1 or v1alpha2) and keeps Lease spec.strategy on a dry-run create in kube-system, else portable), native or portable.")
	fs.DurationVar(&o.CandidateTTL, "candidate-ttl", o.CandidateTTL, "Candidates not renewed for this long are expired and left out, as with cle-controller's --candidate-ttl.")
	fs.DurationVar(&o.LeaseDuration, "lease-duration", o.LeaseDuration, "Lease duration of Leases without leaseDurationSeconds, as with cle-controller's --lease-duration.")

	root.AddCommand(o.statusCommand(), o.describeCommand(), o.watchCommand())
	return root
}

func (o *Options) addListFlags(cmd *cobra.Command, output bool) {
	cmd.Flags().BoolVarP(&o.AllNamespaces, "all-namespaces", "A", false, "Show the Leases of all namespaces.")
	if output {
		cmd.Flags().StringVarP(&o.Output, "output", "o", "", "Output format: wide, json or yaml.")
	}
}

func (o *Options) statusCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status [LEASE]",
		Short: "List Leases under coordinated election, or one Lease, with their state",
		Long:  "List the Leases that LeaseCandidates name or that carry a strategy, in the namespace (or all of them with -A), or the one Lease named.\n\n" + statesHelp,
		Example: `  kubectl cle status -A
  kubectl cle status -n kube-system kube-scheduler -o wide`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.status(cmd.Context(), args)
		},
	}
	o.addListFlags(cmd, true)
	return cmd
}

func (o *Options) describeCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "describe LEASE",
		Short:   "Show a Lease's candidates in rank order, its recent Events, and why the holder is who it is",
		Example: `  kubectl cle describe -n kube-system kube-controller-manager`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.describe(cmd.Context(), args[0])
		},
	}
	cmd.Flags().StringVarP(&o.Output, "output", "o", "", "Output format: json or yaml.")
	return cmd
}

func (o *Options) watchCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "watch [LEASE]",
		Short: "Print one line per change of a Lease's holder, preferredHolder or candidates",
		Long: `Print the current holder, preferred holder and candidates of each Lease under coordinated election,
then one timestamped line per change: holder (with the new term), preferredHolder, and candidates
joining (+) or leaving (-), a candidate that changes versions showing as both. Each line ends with
the Lease's state and best candidate. Stop it with Ctrl-C.`,
		Example: `  kubectl cle watch -n kube-system kube-scheduler`,
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.watch(cmd.Context(), args)
		},
	}
	o.addListFlags(cmd, false)
	return cmd
}

// setup connects and chooses the API mode.
func (o *Options) setup(ctx context.Context) (kubectlcle.Source, kubectlcle.Judge, string, error) {
	if err := kubectlcle.ValidateOutput(o.Output); err != nil {
		return kubectlcle.Source{}, kubectlcle.Judge{}, "", err
	}
	cfg, err := o.ConfigFlags.ToRESTConfig()
	if err != nil {
		return kubectlcle.Source{}, kubectlcle.Judge{}, "", err
	}
	cfg.UserAgent = "kubectl-cle/" + Version
	namespace, _, err := o.ConfigFlags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return kubectlcle.Source{}, kubectlcle.Judge{}, "", err
	}
	clients, err := access.NewClients(cfg)
	if err != nil {
		return kubectlcle.Source{}, kubectlcle.Judge{}, "", err
	}
	// Which mode was chosen and why is a controller's news; here it shows
	// with -v=1 and above.
	acc, err := access.Detect(klog.NewContext(ctx, klog.FromContext(ctx).V(1)), clients, o.APIMode)
	if err != nil {
		hint := ""
		if o.APIMode == access.ModeAuto && !errors.Is(err, access.ErrCRDMissing) {
			hint = " (choosing needs a dry-run create of a Lease in " + access.ProbeNamespace + "; --api-mode=native or portable needs only discovery)"
		}
		return kubectlcle.Source{}, kubectlcle.Judge{}, "", fmt.Errorf("choose the API mode%s: %w", hint, err)
	}
	judge := kubectlcle.Judge{Registry: strategy.NewDefaultRegistry(), CandidateTTL: o.CandidateTTL, DefaultLeaseDuration: o.LeaseDuration}
	return kubectlcle.Source{Access: acc, Kube: clients.Kube}, judge, namespace, nil
}

func (o *Options) status(ctx context.Context, args []string) error {
	src, judge, namespace, err := o.setup(ctx)
	if err != nil {
		return err
	}
	name := ""
	if len(args) == 1 {
		name = args[0]
		if o.AllNamespaces {
			return errors.New("a Lease name cannot be given with --all-namespaces")
		}
	}
	listNS := namespace
	if o.AllNamespaces {
		listNS = ""
	}
	leases, cands, err := src.Snapshot(ctx, listNS)
	if err != nil {
		return err
	}
	inputs, err := kubectlcle.Group(leases, cands, namespace, name)
	if err != nil {
		return err
	}
	now := o.Clock.Now()
	rows := make([]kubectlcle.LeaseStatus, 0, len(inputs))
	for _, in := range inputs {
		s := judge.Summarize(in, now)
		rows = append(rows, kubectlcle.Status(&s, src.Access.Mode()))
	}
	if len(rows) == 0 && (o.Output == kubectlcle.OutputTable || o.Output == kubectlcle.OutputWide) {
		where := "namespace " + namespace
		if o.AllNamespaces {
			where = "any namespace"
		}
		fmt.Fprintf(o.streams.ErrOut, "No Leases under coordinated election found in %s.\n", where)
		return nil
	}
	return kubectlcle.PrintStatus(o.streams.Out, rows, o.Output, o.AllNamespaces, now)
}

func (o *Options) describe(ctx context.Context, name string) error {
	src, judge, namespace, err := o.setup(ctx)
	if err != nil {
		return err
	}
	leases, cands, err := src.Snapshot(ctx, namespace)
	if err != nil {
		return err
	}
	inputs, err := kubectlcle.Group(leases, cands, namespace, name)
	if err != nil {
		return err
	}
	events, err := src.Events(ctx, inputs[0].Key)
	if err != nil {
		return err
	}
	now := o.Clock.Now()
	s := judge.Summarize(inputs[0], now)
	return kubectlcle.PrintDescription(o.streams.Out, kubectlcle.Describe(&s, src.Access.Mode(), events), o.Output, now)
}

func (o *Options) watch(ctx context.Context, args []string) error {
	src, judge, namespace, err := o.setup(ctx)
	if err != nil {
		return err
	}
	w := &kubectlcle.Watcher{Source: src, Judge: judge, Clock: o.Clock, Out: o.streams.Out, Namespace: namespace}
	if len(args) == 1 {
		if o.AllNamespaces {
			return errors.New("a Lease name cannot be given with --all-namespaces")
		}
		w.Name = args[0]
	} else if o.AllNamespaces {
		w.Namespace = ""
	}
	return w.Run(ctx)
}

// Main runs the plugin with args and returns the exit code.
func Main(ctx context.Context, args []string, streams genericiooptions.IOStreams) int {
	cmd := NewCommand(streams)
	cmd.SetArgs(args)
	if err := cmd.ExecuteContext(ctx); err != nil {
		fmt.Fprintf(streams.ErrOut, "error: %s\n", strings.TrimSpace(err.Error()))
		return 1
	}
	return 0
}
