package framework

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/cle-dev/cle/internal/promtest"
)

// BuildCommand builds the main package pkg (an import path of this module)
// into a temporary directory and returns the binary's path.
func BuildCommand(t testing.TB, pkg string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput()
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
