package app

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Shell completion. Cobra's completion command writes the scripts for
// kubectl-cle run by that name (kubectl cle completion bash|zsh|fish|powershell);
// run as kubectl cle, kubectl's own completion asks kubectl_complete-cle on
// PATH, which asks kubectl-cle __complete. Either way the answers are these:
// Lease names for the LEASE argument (completeLeases), and for kubectl's
// connection flags what kubectl offers for its own: the cluster's namespaces
// for -n, and the kubeconfig's contexts, clusters and users.

// registerFlagCompletions completes the values of the connection flags on
// root and every subcommand.
func (o *Options) registerFlagCompletions(root *cobra.Command) {
	for _, c := range []struct {
		flag string
		fn   cobra.CompletionFunc
	}{
		{"namespace", o.completeNamespaces},
		{"context", o.completeKubeconfig(func(c *clientcmdapi.Config) []string { return slices.Collect(maps.Keys(c.Contexts)) })},
		{"cluster", o.completeKubeconfig(func(c *clientcmdapi.Config) []string { return slices.Collect(maps.Keys(c.Clusters)) })},
		{"user", o.completeKubeconfig(func(c *clientcmdapi.Config) []string { return slices.Collect(maps.Keys(c.AuthInfos)) })},
	} {
		// ConfigFlags added each of these flags to root: an error here
		// is a broken build, not a user's mistake.
		if err := root.RegisterFlagCompletionFunc(c.flag, c.fn); err != nil {
			panic(err)
		}
	}
}

// completeNamespaces completes -n with the namespaces of the cluster the
// other flags on the line (or the kubeconfig) connect to.
func (o *Options) completeNamespaces(cmd *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	cfg, err := o.restConfig()
	if err != nil {
		return compError(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return compError(err)
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	names, err := namespaceNames(ctx, client, toComplete)
	if err != nil {
		return compError(err)
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}

// namespaceNames returns the names of the namespaces that start with
// prefix, in order.
func namespaceNames(ctx context.Context, client kubernetes.Interface, prefix string) ([]string, error) {
	list, err := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list namespaces: %w", err)
	}
	names := make([]string, 0, len(list.Items))
	for _, ns := range list.Items {
		names = append(names, ns.Name)
	}
	return withPrefix(names, prefix), nil
}

// completeKubeconfig returns a completion of the names entries picks from
// the kubeconfig (the one --kubeconfig names, if given).
func (o *Options) completeKubeconfig(entries func(*clientcmdapi.Config) []string) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		raw, err := o.ConfigFlags.ToRawKubeConfigLoader().RawConfig()
		if err != nil {
			return compError(err)
		}
		return withPrefix(entries(&raw), toComplete), cobra.ShellCompDirectiveNoFileComp
	}
}

// withPrefix returns the names that start with prefix, sorted.
func withPrefix(names []string, prefix string) []string {
	out := make([]string, 0, len(names))
	for _, n := range names {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// compError reports err where cobra's completion debugging shows it
// (BASH_COMP_DEBUG_FILE), and offers nothing, not even file names.
func compError(err error) ([]string, cobra.ShellCompDirective) {
	cobra.CompDebugln(err.Error(), true)
	return nil, cobra.ShellCompDirectiveError
}
