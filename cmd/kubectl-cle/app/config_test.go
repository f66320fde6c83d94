package app

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoKubeconfig: with no kubeconfig to read and not in a cluster, every
// command says so, and what to do, before it asks any server anything;
// client-go's fallback, a server on localhost:8080, never comes into it.
func TestNoKubeconfig(t *testing.T) {
	dir := t.TempDir()
	missing := []string{filepath.Join(dir, "a"), filepath.Join(dir, "b")}
	t.Setenv("KUBECONFIG", strings.Join(missing, string(os.PathListSeparator)))
	want := "error: no kubeconfig: set KUBECONFIG, pass --kubeconfig, or write ~/.kube/config (looked for " +
		missing[0] + ", " + missing[1] + "; not in a cluster either)\n"
	for _, args := range [][]string{{"status"}, {"status", "-A"}, {"describe", "x"}, {"watch"}, {"--api-mode=native", "status"}} {
		s, out, errOut := streams()
		o := NewOptions(s)
		o.inCluster = func() bool { return false }
		if code := run(o, args); code != 1 || errOut.String() != want || out.Len() != 0 {
			t.Errorf("%q: exit %d, stdout %q, stderr\n%s\nwant\n%s", args, code, out.String(), errOut.String(), want)
		}
	}
}

func run(o *Options, args []string) int {
	cmd := o.command()
	cmd.SetArgs(args)
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		o.streams.ErrOut.Write([]byte("error: " + err.Error() + "\n"))
		return 1
	}
	return 0
}

// TestCheckConfigured: what counts as a cluster to connect to.
func TestCheckConfigured(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	withContext := writeKubeconfig(t, "https://127.0.0.1:1", "a")
	noCurrent := filepath.Join(dir, "no-current")
	data, err := os.ReadFile(withContext)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(noCurrent, []byte(strings.Replace(string(data), "current-context: a", "current-context: \"\"", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	nowhere := filepath.Join(dir, "nowhere")

	for _, tc := range []struct {
		name       string
		kubeconfig string // KUBECONFIG
		args       []string
		inCluster  bool
		wantErr    string // "" for none
	}{
		{name: "current context", kubeconfig: withContext},
		{name: "no kubeconfig", kubeconfig: nowhere, wantErr: "no kubeconfig: set KUBECONFIG, pass --kubeconfig, or write ~/.kube/config (looked for " + nowhere + "; "},
		{name: "in a cluster", kubeconfig: nowhere, inCluster: true},
		{name: "--server", kubeconfig: nowhere, args: []string{"--server", "https://127.0.0.1:1"}},
		{name: "--context", kubeconfig: noCurrent, args: []string{"--context", "a"}},
		{name: "--cluster", kubeconfig: noCurrent, args: []string{"--cluster", "cluster-a"}},
		{name: "--kubeconfig", kubeconfig: nowhere, args: []string{"--kubeconfig", withContext}},
		{name: "--kubeconfig missing", kubeconfig: withContext, args: []string{"--kubeconfig", nowhere}, wantErr: "no such file"},
		{name: "no current context", kubeconfig: noCurrent, wantErr: "no current context in kubeconfig " + noCurrent + ": pass --context, or set one with kubectl config use-context"},
		{name: "empty kubeconfig", kubeconfig: nowhere + string(os.PathListSeparator) + empty, wantErr: "no current context in kubeconfig " + empty + ":"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("KUBECONFIG", tc.kubeconfig)
			s, _, _ := streams()
			o := NewOptions(s)
			o.inCluster = func() bool { return tc.inCluster }
			if err := o.command().ParseFlags(tc.args); err != nil {
				t.Fatal(err)
			}
			err := o.checkConfigured()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("error %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("error %v, want one saying %q", err, tc.wantErr)
			}
		})
	}
}
