package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// publishEnv names the publish tool (hack/tools/image/publish), built by
// hack/e2e.sh.
const publishEnv = "CLE_PUBLISH"

// The stand-ins of the hosting services a release is published to, on the
// node's address: an OCI registry for ghcr.io (the image and the chart) and
// a file server for GitHub's release downloads.
const (
	registryAddr = nodeIP + ":5000"
	assetsAddr   = nodeIP + ":5080"
	// chartRepository is where the chart is pushed, under the registry:
	// oci://ghcr.io/cle-dev/charts/cle once published.
	chartRepository = "cle-dev/charts"
)

// publish publishes the release to the stand-ins as a release's pipeline
// publishes it to the hosting services, with only the host names changed:
// the image to the registry under the repository, tag and digest the
// bundles pin (publish push), the chart with helm push, and the assets laid
// out for the file server's URL (publish assets: the krew manifest names
// the archives there) under GitHub's download path. TestSignedRelease signs
// the image there and attests its SBOM and provenance. containerd's hosts
// configuration then sends pulls for the bundles' registry to the stand-in,
// so that every Pod of the release pulls its image as on a user's cluster.
func (n *node) publish(ctx context.Context) error {
	tool := os.Getenv(publishEnv)
	helm := os.Getenv(helmEnv)
	if tool == "" || helm == "" {
		return fmt.Errorf("%s and %s must name the publish tool and helm: run the node test with make e2e", publishEnv, helmEnv)
	}
	prefix := "/cle-dev/cle/releases/download/" + n.release.tag + "/"
	n.assetsURL = "http://" + assetsAddr + strings.TrimSuffix(prefix, "/")
	assets := filepath.Join(n.dir, "assets")
	if out, err := exec.CommandContext(ctx, tool, "assets", "--release="+n.release.dir, "--out="+assets, "--url="+n.assetsURL).CombinedOutput(); err != nil {
		return fmt.Errorf("publish assets: %w\n%s", err, out)
	}
	if _, err := n.startComponent("stand-ins", tool, "serve", "--registry="+registryAddr, "--assets="+assetsAddr,
		"--assets-dir="+assets, "--assets-prefix="+prefix); err != nil {
		return err
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, url := range []string{"http://" + registryAddr + "/v2/", n.assetsURL + "/checksums.txt"} {
			resp, err := http.Get(url)
			if err != nil {
				return false, nil
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("the stand-ins did not serve: %w", err)
	}

	begin := time.Now()
	for _, c := range []*exec.Cmd{
		exec.CommandContext(ctx, tool, "push", "--release="+n.release.dir, "--registry="+registryAddr, "--plain-http"),
		n.helmCommand(ctx, helm, "push", filepath.Join(n.release.dir, "cle-"+strings.TrimPrefix(n.release.tag, "v")+".tgz"), "oci://"+registryAddr+"/"+chartRepository, "--plain-http"),
	} {
		if out, err := c.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w\n%s", strings.Join(append([]string{filepath.Base(c.Path)}, c.Args[1:]...), " "), err, out)
		}
	}
	n.chartRef = "oci://" + registryAddr + "/" + chartRepository + "/cle"
	fmt.Printf("e2e: release %s published to the stand-ins in %s: image %s:%s@%s and chart %s on %s, assets under %s\n",
		n.release.tag, time.Since(begin).Round(100*time.Millisecond), n.release.repo, n.release.tag, n.release.digest, n.chartRef, registryAddr, n.assetsURL)

	// containerd pulls images of the bundles' registry from the stand-in.
	host, _, _ := strings.Cut(n.release.repo, "/")
	n.registryHosts = filepath.Join(n.dir, "containerd", "certs.d")
	return writeFile(filepath.Join(n.registryHosts, host, "hosts.toml"), fmt.Sprintf(registryHostsConfig, host, registryAddr))
}

// registryHostsConfig sends containerd's pulls for a registry (host) to the
// stand-in (address), over plain HTTP.
const registryHostsConfig = `server = "https://%s"

[host."http://%s"]
  capabilities = ["pull", "resolve"]
`
