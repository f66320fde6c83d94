package app

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/fence"
)

// fenceOptions are the flags of kubectl cle fence.
type fenceOptions struct {
	serviceAccount, serviceAccountNamespace string
	resources, verbs, namespaces            []string
	warnOnly, byToken                       bool
	output                                  string
}

func (o *Options) fenceCommand() *cobra.Command {
	f := &fenceOptions{verbs: []string{"create", "update", "patch", "delete", "deletecollection"}, output: "yaml"}
	cmd := &cobra.Command{
		Use:   "fence LEASE --service-account=NAME --resource=RESOURCE[.GROUP] ...",
		Short: "Print the admission policy that lets only the Lease's holder make its leader's writes",
		Long: `Print a ValidatingAdmissionPolicy and its binding (apply them with kubectl apply -f -) that make
kube-apiserver refuse the writes named by --resource and --verbs, made by the ServiceAccount the
replicas run as, from any Pod but the one whose process holds the Lease now, as the holder's last
renewal says (its cle.dev/holder-instance stamp: candidates of pkg/candidate with a proof of death
write it). A leader that was paused, killed with writes queued, or preempted is refused from the
moment the Lease names another holder, whatever its own process does.

Refused as well: every such write while the Lease has no holder, or one without a stamp (outside a
Pod, or without a proof of death); and one made with a token of the ServiceAccount bound to no Pod.
Never matched: other users, and the election's own objects (Leases, LeaseCandidates, Events) and the
review APIs, whatever --resource says. Nothing is written: the command prints, and needs no cluster.

Bind the keeper of cle-policies.yaml (or manifests/policies/lease-params.yaml) before the first fence
and keep it: without it, kube-apiserver up to 1.36 stops watching the Leases its policies take as
parameters once the last fence is removed, and fences bound after that refuse nothing.

In an emergency, --warn-only prints a binding that lets the writes through with a warning and an
audit annotation each; deleting the binding turns fencing off.

With --by-token the policy judges updates by the fencing token they carry instead, for leaders
outside Pods or without a proof of death: leader work stamps each object it writes with its term's
token (pkg/fence's Stamp, annotation cle.dev/fencing-token), and an update carrying a lower token
than the object's is refused.`,
		Example: `  kubectl cle fence my-controller -n team-a --service-account=my-controller \
    --resource=deployments.apps --resource=configmaps | kubectl apply -f -
  kubectl cle fence my-controller -n team-a --service-account=my-controller \
    --resource=deployments.apps --namespaces=team-a,team-b --verbs=create,update,patch
  kubectl cle fence my-controller -n team-a --by-token --resource=configmaps`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: o.completeLeases,
		RunE: func(cmd *cobra.Command, args []string) error {
			// -n needs no kubeconfig; without it, the context's namespace.
			namespace := ptr.Deref(o.ConfigFlags.Namespace, "")
			if namespace == "" {
				var err error
				if namespace, _, err = o.ConfigFlags.ToRawKubeConfigLoader().Namespace(); err != nil {
					return fmt.Errorf("the Lease's namespace (or give it with -n): %w", err)
				}
			}
			return f.print(o.streams.Out, namespace, args[0])
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.serviceAccount, "service-account", "", "The ServiceAccount the replicas run as (required).")
	fs.StringVar(&f.serviceAccountNamespace, "service-account-namespace", "", "The ServiceAccount's namespace (default: the Lease's).")
	fs.StringArrayVar(&f.resources, "resource", nil, "A resource the leader writes, as kubectl names it: RESOURCE[.GROUP][/SUBRESOURCE] (configmaps, deployments.apps, deployments.apps/scale, *.apps); repeat it for more (required).")
	fs.StringSliceVar(&f.verbs, "verbs", f.verbs, "The writes fenced: create, update, patch, delete, deletecollection.")
	fs.StringSliceVar(&f.namespaces, "namespaces", nil, "Fence the writes to objects of these namespaces only (default: every namespace, and cluster-scoped objects).")
	fs.BoolVar(&f.byToken, "by-token", false, "Judge updates by the fencing token they carry (annotation "+fence.TokenAnnotation+", which leader work sets with pkg/fence's Stamp) instead of by the Pod they come from: an update carrying a lower token than the object's is refused. Needs no Pod and no proof of death; --service-account then only narrows whose updates are judged.")
	fs.BoolVar(&f.warnOnly, "warn-only", false, "Admit the writes the policy would refuse, with a warning and an audit annotation each: an emergency override.")
	fs.StringVarP(&f.output, "output", "o", f.output, "Output format: yaml or json (a List).")
	_ = cmd.MarkFlagRequired("resource")
	return cmd
}

// print writes the policy and binding of the Lease namespace/lease.
func (f *fenceOptions) print(out io.Writer, namespace, lease string) error {
	if f.output != "yaml" && f.output != "json" {
		return fmt.Errorf("unsupported output format %q: want yaml or json", f.output)
	}
	if f.serviceAccount == "" && !f.byToken {
		return errors.New("--service-account is required: the ServiceAccount the replicas run as (or fence by token with --by-token)")
	}
	e := fence.Election{
		Namespace: namespace, Lease: lease, ServiceAccount: f.serviceAccount, ServiceAccountNamespace: f.serviceAccountNamespace,
		Namespaces: f.namespaces, WarnOnly: f.warnOnly, ByToken: f.byToken,
	}
	var errs []error
	for _, r := range f.resources {
		rule, err := fence.ParseResource(r)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, v := range f.verbs {
			rule.Verbs = append(rule.Verbs, strings.ToLower(strings.TrimSpace(v)))
		}
		e.Rules = append(e.Rules, rule)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	policy, binding, err := fence.Objects(e)
	if err != nil {
		return err
	}
	if f.output == "json" {
		list := &metav1.List{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "List"},
			Items: []runtime.RawExtension{{Object: policy}, {Object: binding}}}
		return (&printers.JSONPrinter{}).PrintObj(list, out)
	}
	p := &printers.YAMLPrinter{} // separates the documents with ---
	for _, obj := range []runtime.Object{policy, binding} {
		if err := p.PrintObj(obj, out); err != nil {
			return err
		}
	}
	return nil
}
