package framework

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/cle-dev/cle/internal/promtest"
)

// GoBuild returns the command "go build args...", building as make release
// and the image's tests do (CGO_ENABLED=0 and cle_goflags of
// hack/lib/build-info.sh): the tests' programs then reuse the packages those
// builds compiled, instead of compiling every dependency once more in
// another configuration.
func GoBuild(args ...string) *exec.Cmd {
	return GoCommand("build", args...)
}

// GoFlags are cle_goflags of hack/lib/build-info.sh, the flags of every
// static build of the repository (with CGO_ENABLED=0).
var GoFlags = []string{"-trimpath", "-gcflags=all=-dwarf=false"}

// GoCommand returns the command "go verb GoFlags args..." with
// CGO_ENABLED=0: a build, run or install in the configuration of GoBuild.
func GoCommand(verb string, args ...string) *exec.Cmd {
	cmd := exec.Command("go", append(append([]string{verb}, GoFlags...), args...)...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	return cmd
}

// BuildCommand builds the main package pkg (an import path of this module)
// into a temporary directory and returns the binary's path.
func BuildCommand(t testing.TB, pkg string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	out, err := GoBuild("-o", bin, pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// Get GETs url with token as bearer token when it is not empty. Over HTTPS
// it does not verify the server's certificate: cle-controller's metrics
// address serves a self-signed one by default.
func Get(ctx context.Context, url, token string) (int, string, error) {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // test servers' certificates are self-signed
	}}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// Scrape reads the metric families of a /metrics URL (see Get).
func Scrape(ctx context.Context, url, token string) ([]*dto.MetricFamily, error) {
	code, body, err := Get(ctx, url, token)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %d: %s", url, code, strings.TrimSpace(body))
	}
	return promtest.Parse(strings.NewReader(body))
}

// servingRE is cle-controller's log line naming an address and its paths.
var servingRE = regexp.MustCompile(`"Serving" address="([^"]+)" paths=\[([^\]]*)\]`)

// ServingAddress waits (30s at most) until the log of c, a cle-controller,
// says which address serves path, and returns it: the port is the kernel's
// choice when the flag asked for port 0.
func ServingAddress(t testing.TB, c *Child, path string) string {
	t.Helper()
	var addr string
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		for _, m := range servingRE.FindAllStringSubmatch(c.Logs(), -1) {
			if strings.Contains(m[2], `"`+path+`"`) {
				addr = m[1]
			}
		}
		return addr != "", nil
	}); err != nil {
		t.Fatalf("%s never served %s: %v", c.p.name, path, err)
	}
	return addr
}
