package app

import (
	"fmt"
	"os"
	"strings"

	"k8s.io/client-go/rest"

	"github.com/cle-dev/cle/internal/version"
)

// restConfig is the client configuration of the connection flags and the
// kubeconfig, as kubectl's. Where client-go would fall back to its default,
// http://localhost:8080, because nothing names a cluster, it says so instead:
// the first request would otherwise fail with a refused connection that
// tells a user nothing about why.
func (o *Options) restConfig() (*rest.Config, error) {
	if err := o.checkConfigured(); err != nil {
		return nil, err
	}
	cfg, err := o.ConfigFlags.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = "kubectl-cle/" + version.Get().Version
	cfg.WarningHandlerWithContext = o.warnings
	return cfg, nil
}

// checkConfigured fails when no cluster is configured: no current context in
// the kubeconfig (or none at all), no --context, --cluster or --server, and
// not running in a cluster.
func (o *Options) checkConfigured() error {
	f := o.ConfigFlags
	for _, flag := range []*string{f.Context, f.ClusterName, f.APIServer} {
		if flag != nil && *flag != "" {
			return nil
		}
	}
	loader := f.ToRawKubeConfigLoader()
	raw, err := loader.RawConfig()
	if err != nil {
		return err
	}
	if raw.CurrentContext != "" || o.inCluster() {
		return nil
	}
	var found, missing []string
	for _, file := range loader.ConfigAccess().GetLoadingPrecedence() {
		if _, err := os.Stat(file); err == nil {
			found = append(found, file)
		} else {
			missing = append(missing, file)
		}
	}
	if len(found) > 0 {
		return fmt.Errorf("no current context in kubeconfig %s: pass --context, or set one with kubectl config use-context", strings.Join(found, ", "))
	}
	return fmt.Errorf("no kubeconfig: set KUBECONFIG, pass --kubeconfig, or write ~/.kube/config (looked for %s; not in a cluster either)", strings.Join(missing, ", "))
}

// inCluster is whether client-go would use the in-cluster configuration:
// the service's environment variables are set and a ServiceAccount token is
// there to read.
func inCluster() bool {
	_, err := rest.InClusterConfig()
	return err == nil
}
