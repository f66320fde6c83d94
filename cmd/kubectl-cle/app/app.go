// Package app wires the kubectl-cle plugin: kubectl's connection, output
// and logging flags, the subcommands and their flags. What it shows is
// computed in pkg/kubectlcle.
package app

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/yaml"

	"github.com/cle-dev/cle/internal/version"
	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/controller"
	"github.com/cle-dev/cle/pkg/kubectlcle"
	"github.com/cle-dev/cle/pkg/strategy"
)

// Options are the flags the subcommands share.
type Options struct {
	ConfigFlags   *genericclioptions.ConfigFlags
	AllNamespaces bool
	// Selector is a label selector on Leases (-l).
	Selector string
	// IncludeNodeLeases keeps kube-node-lease in -A.
	IncludeNodeLeases bool
	NoHeaders         bool
	APIMode           string
	CandidateTTL      time.Duration
	PingTimeout       time.Duration
	LeaseDuration     time.Duration
	// Clock stamps watch lines and measures ages and expiry.
	Clock clock.WithDelayedExecution

	streams genericiooptions.IOStreams
	// printFlags are the output flags of each command, by its name.
	printFlags map[string]*genericclioptions.PrintFlags
	// warnings prints each distinct warning of the API server once.
	warnings rest.WarningHandlerWithContext
	// inCluster tells whether client-go would use the in-cluster
	// configuration when no kubeconfig names a cluster.
	inCluster func() bool
}

// NewOptions returns the defaults.
func NewOptions(streams genericiooptions.IOStreams) *Options {
	return &Options{
		ConfigFlags:   genericclioptions.NewConfigFlags(true),
		APIMode:       access.ModeAuto,
		CandidateTTL:  controller.DefaultCandidateTTL,
		PingTimeout:   controller.DefaultPingTimeout,
		LeaseDuration: controller.DefaultLeaseDuration,
		Clock:         clock.RealClock{},
		streams:       streams,
		printFlags:    map[string]*genericclioptions.PrintFlags{},
		warnings:      warningPrinter{rest.NewWarningWriter(streams.ErrOut, rest.WarningWriterOptions{Deduplicate: true})},
		inCluster:     inCluster,
	}
}

// warningPrinter prints the API server's warnings as kubectl does
// ("Warning: <text>" on stderr), each distinct one once.
type warningPrinter struct{ w rest.WarningHandler }

func (p warningPrinter) HandleWarningHeaderWithContext(_ context.Context, code int, agent, text string) {
	p.w.HandleWarningHeader(code, agent, text)
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
expired and left out, and those that have not renewed since a ping older than --ping-timeout are
passed over until they do, as the controller does.`

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
controller built into kube-apiserver, in either API mode: native (coordination.k8s.io
LeaseCandidates) or portable (leasecandidates.cle.dev and Lease annotations), chosen as
cle-controller chooses it (--api-mode), and without writing anything for a user who may
only read.

` + statesHelp,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(o.streams.Out)
	root.SetErr(o.streams.ErrOut)
	fs := root.PersistentFlags()
	o.ConfigFlags.AddFlags(fs)
	addKlogFlags(fs)
	fs.StringVar(&o.APIMode, "api-mode", o.APIMode, "API mode: auto (the mode elections run in: native when the server serves coordination.k8s.io LeaseCandidates and keeps Lease spec.strategy on a dry-run create in kube-system, else portable; when the server could run both, or that dry run is forbidden, from the election controllers' lock Leases and the candidates that exist, in the namespace shown first), native or portable.")
	fs.DurationVar(&o.CandidateTTL, "candidate-ttl", o.CandidateTTL, "Candidates not renewed for this long are expired and left out, as with cle-controller's --candidate-ttl.")
	fs.DurationVar(&o.PingTimeout, "ping-timeout", o.PingTimeout, "Candidates pinged this long ago that have not renewed since are passed over, as with cle-controller's --ping-timeout.")
	fs.DurationVar(&o.LeaseDuration, "lease-duration", o.LeaseDuration, "Lease duration of Leases without leaseDurationSeconds, as with cle-controller's --lease-duration.")

	root.AddCommand(o.statusCommand(), o.describeCommand(), o.watchCommand(), o.fenceCommand(), o.versionCommand())
	o.registerFlagCompletions(root)
	return root
}

// addKlogFlags adds klog's -v and --vmodule, as kubectl has them.
func addKlogFlags(fs *pflag.FlagSet) {
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	for _, name := range []string{"v", "vmodule"} {
		fs.AddGoFlag(klogFlags.Lookup(name))
	}
}

func (o *Options) addListFlags(cmd *cobra.Command) {
	cmd.Flags().BoolVarP(&o.AllNamespaces, "all-namespaces", "A", false, "Show the Leases of all namespaces (but kube-node-lease, see --include-node-leases).")
	cmd.Flags().StringVarP(&o.Selector, "selector", "l", "", "Label selector on Leases (e.g. -l app=x,tier!=db): only the Leases it selects are shown.")
	cmd.Flags().BoolVar(&o.IncludeNodeLeases, "include-node-leases", false, "With -A, also list namespace kube-node-lease, which holds one heartbeat Lease per node and is left out by default.")
}

// addPrintFlags adds -o and the template flags to cmd. The formats kubectl
// cle prints itself come first in -o's help.
func (o *Options) addPrintFlags(cmd *cobra.Command, own ...string) {
	pf := genericclioptions.NewPrintFlags("").WithTypeSetter(kubectlcle.Scheme)
	o.printFlags[cmd.Name()] = pf
	pf.AddFlags(cmd)
	// The objects printed have no managedFields.
	_ = cmd.Flags().MarkHidden("show-managed-fields")
	cmd.Flags().Lookup("output").Usage = fmt.Sprintf("Output format. One of: (%s).", strings.Join(append(own, pf.AllowedFormats()...), ", "))
}

// format turns the output flags of command into a Format; own are the
// formats besides the default that kubectl cle prints itself (wide).
func (o *Options) format(command string, own ...string) (kubectlcle.Format, error) {
	pf := o.printFlags[command]
	f := kubectlcle.Format{Output: *pf.OutputFormat, NoHeaders: o.NoHeaders}
	template := pf.TemplatePrinterFlags.TemplateArgument != nil && *pf.TemplatePrinterFlags.TemplateArgument != ""
	if (f.Output == kubectlcle.OutputTable && !template) || slices.Contains(own, f.Output) {
		return f, nil
	}
	p, err := pf.ToPrinter()
	if genericclioptions.IsNoCompatiblePrinterError(err) {
		return f, fmt.Errorf("unable to match a printer suitable for the output format %q, allowed formats are: %s",
			f.Output, strings.Join(append(own, pf.AllowedFormats()...), ","))
	}
	if err != nil {
		return f, err
	}
	f.Printer = p
	return f, nil
}

func (o *Options) statusCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status [LEASE]",
		Short: "List Leases under coordinated election, or one Lease, with their state",
		Long: `List the Leases that LeaseCandidates name or that carry a strategy, in the namespace (or all of
them with -A), or the one Lease named. A line above the table says which election controller
acts (from its lock Lease in kube-system) and since when.

` + statesHelp,
		Example: `  kubectl cle status -A
  kubectl cle status -n kube-system kube-scheduler -o wide
  kubectl cle status -o name | xargs kubectl get -o yaml
  kubectl cle status -o jsonpath='{.items[*].holder}'`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: o.completeLeases,
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := o.format(cmd.Name(), kubectlcle.OutputWide)
			if err != nil {
				return err
			}
			return o.status(cmd.Context(), args, f)
		},
	}
	o.addListFlags(cmd)
	cmd.Flags().BoolVar(&o.NoHeaders, "no-headers", false, "When printing a table, leave out the headers and the election controller line.")
	o.addPrintFlags(cmd, kubectlcle.OutputWide)
	return cmd
}

func (o *Options) describeCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:               "describe LEASE",
		Short:             "Show a Lease's candidates in rank order, its recent Events, and why the holder is who it is",
		Example:           `  kubectl cle describe -n kube-system kube-controller-manager`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: o.completeLeases,
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := o.format(cmd.Name())
			if err != nil {
				return err
			}
			return o.describe(cmd.Context(), args[0], f)
		},
	}
	o.addPrintFlags(cmd)
	return cmd
}

func (o *Options) watchCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "watch [LEASE]",
		Short: "Print one line per change of a Lease's holder, preferredHolder or candidates",
		Long: `Print the current holder, preferred holder and candidates of each Lease under coordinated election,
then one timestamped line per change: holder (with the new term), preferredHolder, and candidates
joining (+) or leaving (-), a candidate that changes versions showing as both. Each line ends with
the Lease's state and best candidate. Stop it with Ctrl-C.

With -o json, yaml or a template it prints one LeaseChange object (kubectl.cle.dev/v1alpha1) each
time it reports a Lease: the changes seen together and the Lease's status after them; with -o
name, the Lease.`,
		Example: `  kubectl cle watch -n kube-system kube-scheduler
  kubectl cle watch -A -o jsonpath='{.lease.namespace}/{.lease.name} {.lease.holder}{"\n"}'`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: o.completeLeases,
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := o.format(cmd.Name())
			if err != nil {
				return err
			}
			return o.watch(cmd.Context(), args, f)
		},
	}
	o.addListFlags(cmd)
	o.addPrintFlags(cmd)
	return cmd
}

func (o *Options) versionCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version of kubectl cle",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info := version.Get()
			switch output {
			case "":
				_, err := fmt.Fprintf(o.streams.Out, "kubectl-cle %s\n", info)
				return err
			case "json", "yaml":
				data, err := json.MarshalIndent(info, "", "  ")
				if err == nil && output == "yaml" {
					data, err = yaml.JSONToYAML(data)
				} else {
					data = append(data, '\n')
				}
				if err != nil {
					return fmt.Errorf("encode the version: %w", err)
				}
				_, err = o.streams.Out.Write(data)
				return err
			default:
				return fmt.Errorf("unsupported output format %q: want json or yaml", output)
			}
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "Output format: json or yaml.")
	return cmd
}

// setup connects and chooses the API mode.
func (o *Options) setup(ctx context.Context) (kubectlcle.Source, kubectlcle.Judge, string, error) {
	logger := klog.FromContext(ctx)
	if o.Selector != "" {
		if _, err := labels.Parse(o.Selector); err != nil {
			return kubectlcle.Source{}, kubectlcle.Judge{}, "", fmt.Errorf("invalid --selector: %w", err)
		}
	}
	cfg, err := o.restConfig()
	if err != nil {
		return kubectlcle.Source{}, kubectlcle.Judge{}, "", err
	}
	namespace, _, err := o.ConfigFlags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return kubectlcle.Source{}, kubectlcle.Judge{}, "", err
	}
	clients, err := access.NewClients(cfg)
	if err != nil {
		return kubectlcle.Source{}, kubectlcle.Judge{}, "", err
	}
	// How the mode was chosen is a controller's news (Info); here it shows
	// with -v=1 and above.
	// With both modes in use, the shown namespace's candidates tell which
	// one its elections run in.
	shown := namespace
	if o.AllNamespaces {
		shown = "" // all namespaces
	}
	acc, err := access.DetectReadOnly(klog.NewContext(ctx, logger.V(1)), clients, o.APIMode, shown, o.Clock)
	if err != nil {
		hint := ""
		if o.APIMode == access.ModeAuto && !errors.Is(err, access.ErrCRDMissing) {
			hint = " (--api-mode=native or --api-mode=portable skips the choice)"
		}
		return kubectlcle.Source{}, kubectlcle.Judge{}, "", fmt.Errorf("choose the API mode%s: %w", hint, err)
	}
	logger.V(1).Info("Using API mode", "mode", acc.Mode(), "server", cfg.Host)
	src := kubectlcle.Source{Access: acc, Kube: clients.Kube, LeaseSelector: o.Selector}
	if !o.IncludeNodeLeases {
		src.ExcludeNamespaces = []string{corev1.NamespaceNodeLease}
	}
	judge := kubectlcle.Judge{Registry: strategy.NewDefaultRegistry(), CandidateTTL: o.CandidateTTL, PingTimeout: o.PingTimeout, DefaultLeaseDuration: o.LeaseDuration}
	return src, judge, namespace, nil
}

// leaseArg checks the LEASE argument against the flags and returns it ("" if
// none).
func (o *Options) leaseArg(args []string) (string, error) {
	if len(args) == 0 {
		return "", nil
	}
	switch {
	case o.AllNamespaces:
		return "", errors.New("a Lease name cannot be given with --all-namespaces")
	case o.Selector != "":
		return "", errors.New("a Lease name cannot be given with --selector")
	}
	return args[0], nil
}

func (o *Options) status(ctx context.Context, args []string, f kubectlcle.Format) error {
	name, err := o.leaseArg(args)
	if err != nil {
		return err
	}
	src, judge, namespace, err := o.setup(ctx)
	if err != nil {
		return err
	}
	listNS := namespace
	if o.AllNamespaces {
		listNS = ""
	}
	leases, cands, err := src.Snapshot(ctx, listNS)
	if err != nil {
		return err
	}
	inputs, err := kubectlcle.Group(leases, cands, kubectlcle.Selection{Namespace: namespace, Name: name, ListedOnly: o.Selector != ""})
	if err != nil {
		return err
	}
	now := o.Clock.Now()
	rows := make([]kubectlcle.LeaseStatus, 0, len(inputs))
	for _, in := range inputs {
		s := judge.Summarize(in, now)
		rows = append(rows, kubectlcle.Status(&s, src.Access.Mode()))
	}
	// Which election controller acts shows above a table with headers, and
	// in the list object; -o name has no place for it.
	var ctrl *kubectlcle.ElectionControllerStatus
	table := f.Printer == nil
	if (table && !f.NoHeaders) || (!table && f.Output != kubectlcle.OutputName) {
		ctrl = src.ElectionController(ctx, now)
	}
	if err := kubectlcle.PrintStatus(o.streams.Out, kubectlcle.NewLeaseStatusList(rows, ctrl), f, o.AllNamespaces, now); err != nil {
		return err
	}
	if len(rows) == 0 && table {
		where := "namespace " + namespace
		if o.AllNamespaces {
			where = "any namespace"
		}
		fmt.Fprintf(o.streams.ErrOut, "No Leases under coordinated election found in %s.\n", where)
	}
	return nil
}

func (o *Options) describe(ctx context.Context, name string, f kubectlcle.Format) error {
	src, judge, namespace, err := o.setup(ctx)
	if err != nil {
		return err
	}
	leases, cands, err := src.Snapshot(ctx, namespace)
	if err != nil {
		return err
	}
	inputs, err := kubectlcle.Group(leases, cands, kubectlcle.Selection{Namespace: namespace, Name: name})
	if err != nil {
		return err
	}
	events, err := src.Events(ctx, inputs[0].Key)
	if err != nil {
		return err
	}
	now := o.Clock.Now()
	s := judge.Summarize(inputs[0], now)
	d := kubectlcle.Describe(&s, src.Access.Mode(), events)
	kubectlcle.DescribeGroup(d, &s, inputs[0].Candidates, leases)
	if f.Output != kubectlcle.OutputName {
		d.ElectionController = src.ElectionController(ctx, now)
	}
	return kubectlcle.PrintDescription(o.streams.Out, d, f, now)
}

func (o *Options) watch(ctx context.Context, args []string, f kubectlcle.Format) error {
	name, err := o.leaseArg(args)
	if err != nil {
		return err
	}
	src, judge, namespace, err := o.setup(ctx)
	if err != nil {
		return err
	}
	w := &kubectlcle.Watcher{
		Source: src, Judge: judge, Clock: o.Clock, Out: o.streams.Out, Format: f,
		Namespace: namespace, Name: name, ListedOnly: o.Selector != "",
	}
	if o.AllNamespaces {
		w.Namespace = ""
	}
	return w.Run(ctx)
}

// completeLeases completes a LEASE argument with the Leases under
// coordinated election in the namespace: those that candidates name and
// those that carry a strategy.
func (o *Options) completeLeases(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	src, _, namespace, err := o.setup(ctx)
	if err != nil {
		return compError(err)
	}
	leases, cands, err := src.Snapshot(ctx, namespace)
	if err != nil {
		return compError(err)
	}
	inputs, err := kubectlcle.Group(leases, cands, kubectlcle.Selection{})
	if err != nil {
		return compError(err)
	}
	var names []string
	for _, in := range inputs {
		if strings.HasPrefix(in.Key.Name, toComplete) {
			names = append(names, in.Key.Name)
		}
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}

// Main runs the plugin with args and returns the exit code.
func Main(ctx context.Context, args []string, streams genericiooptions.IOStreams) int {
	defer klog.Flush()
	cmd := NewCommand(streams)
	cmd.SetArgs(args)
	if err := cmd.ExecuteContext(ctx); err != nil {
		fmt.Fprintf(streams.ErrOut, "error: %s\n", strings.TrimSpace(err.Error()))
		return 1
	}
	return 0
}
