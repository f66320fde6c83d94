package app

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2/ktesting"
)

func namespaces(names ...string) []runtime.Object {
	objs := make([]runtime.Object, 0, len(names))
	for _, n := range names {
		objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}})
	}
	return objs
}

// TestNamespaceNames: -n completes with the cluster's namespaces that start
// with the word typed, in order.
func TestNamespaceNames(t *testing.T) {
	objs := namespaces("kube-system", "default", "cle-system", "kube-public", "kube-node-lease")
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{prefix: "", want: []string{"cle-system", "default", "kube-node-lease", "kube-public", "kube-system"}},
		{prefix: "kube-p", want: []string{"kube-public"}},
		{prefix: "kube-", want: []string{"kube-node-lease", "kube-public", "kube-system"}},
		{prefix: "x", want: []string{}},
	} {
		_, ctx := ktesting.NewTestContext(t)
		got, err := namespaceNames(ctx, fake.NewClientset(objs...), tc.prefix)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("prefix %q: %q, %v; want %q", tc.prefix, got, err, tc.want)
		}
	}

	// A user who may not list namespaces gets nothing, and the reason.
	client := fake.NewClientset(objs...)
	client.PrependReactor("list", "namespaces", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(corev1.Resource("namespaces"), "", nil)
	})
	_, ctx := ktesting.NewTestContext(t)
	if got, err := namespaceNames(ctx, client, ""); !apierrors.IsForbidden(err) || got != nil {
		t.Errorf("forbidden: %q, %v; want the Forbidden error", got, err)
	}
}

// writeKubeconfig writes a kubeconfig with these contexts, each with a
// cluster and a user of its name, the first one current, all on server.
func writeKubeconfig(t *testing.T, server string, contexts ...string) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	for _, c := range contexts {
		cfg.Clusters["cluster-"+c] = &clientcmdapi.Cluster{Server: server, InsecureSkipTLSVerify: true}
		cfg.AuthInfos["user-"+c] = &clientcmdapi.AuthInfo{Token: "token"}
		cfg.Contexts[c] = &clientcmdapi.Context{Cluster: "cluster-" + c, AuthInfo: "user-" + c}
	}
	if len(contexts) > 0 {
		cfg.CurrentContext = contexts[0]
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// complete runs kubectl-cle __complete with args, as a shell's completion
// (or kubectl_complete-cle) does, and returns the completions and the
// directive line.
func complete(t *testing.T, args ...string) ([]string, string) {
	t.Helper()
	s, out, errOut := streams()
	if code := Main(context.Background(), append([]string{"__complete"}, args...), s); code != 0 {
		t.Fatalf("__complete %q: exit %d, %s", args, code, errOut.String())
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	return lines[:len(lines)-1], lines[len(lines)-1]
}

// TestCompleteKubeconfigFlags: --context, --cluster and --user complete
// with the entries of the kubeconfig, the one --kubeconfig names if given.
func TestCompleteKubeconfigFlags(t *testing.T) {
	kc := writeKubeconfig(t, "https://127.0.0.1:1", "prod", "dev-b", "dev-a")
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{args: []string{"status", "--kubeconfig", kc, "--context", ""}, want: []string{"dev-a", "dev-b", "prod"}},
		{args: []string{"describe", "--kubeconfig", kc, "--context", "dev"}, want: []string{"dev-a", "dev-b"}},
		{args: []string{"--kubeconfig", kc, "watch", "--context=p"}, want: []string{"prod"}},
		{args: []string{"status", "--kubeconfig", kc, "--cluster", "cluster-d"}, want: []string{"cluster-dev-a", "cluster-dev-b"}},
		{args: []string{"status", "--kubeconfig", kc, "--user", "user-p"}, want: []string{"user-prod"}},
		{args: []string{"status", "--kubeconfig", kc, "--context", "x"}, want: nil},
	} {
		got, directive := complete(t, tc.args...)
		if !slices.Equal(got, tc.want) || directive != ":4" {
			t.Errorf("%q: %q %s; want %q :4 (no file names)", tc.args, got, directive, tc.want)
		}
	}

	// KUBECONFIG is read as kubectl reads it.
	t.Setenv("KUBECONFIG", kc)
	if got, _ := complete(t, "status", "--context", "d"); !slices.Equal(got, []string{"dev-a", "dev-b"}) {
		t.Errorf("with KUBECONFIG: %q", got)
	}
}

// TestCompleteNamespaceFlag: -n completes with the namespaces of the
// cluster the kubeconfig (and --context) connect to.
func TestCompleteNamespaceFlag(t *testing.T) {
	var (
		mu       sync.Mutex
		requests []string
	)
	server := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		requests = append(requests, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		if r.Method != http.MethodGet || r.URL.Path != "/api/v1/namespaces" {
			http.NotFound(w, r)
			return
		}
		list := corev1.NamespaceList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "NamespaceList"}}
		for _, n := range []string{"kube-system", "default", "kube-public"} {
			list.Items = append(list.Items, corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&list)
	}))
	defer server.Close()
	kc := writeKubeconfig(t, server.URL, "test")

	for _, args := range [][]string{
		{"status", "--kubeconfig", kc, "-n", "kube"},
		{"describe", "--kubeconfig", kc, "--namespace", "kube"},
		{"--kubeconfig", kc, "--context", "test", "watch", "-n", "kube"},
	} {
		mu.Lock()
		requests = nil
		mu.Unlock()
		got, directive := complete(t, args...)
		if want := []string{"kube-public", "kube-system"}; !slices.Equal(got, want) || directive != ":4" {
			t.Errorf("%q: %q %s; want %q :4", args, got, directive, want)
		}
		mu.Lock()
		if want := []string{"GET /api/v1/namespaces Bearer token"}; !slices.Equal(requests, want) {
			t.Errorf("%q: requests %q, want %q", args, requests, want)
		}
		mu.Unlock()
	}

	// Without a cluster to ask, nothing; the shell offers no file names.
	got, directive := complete(t, "status", "--kubeconfig", writeKubeconfig(t, "https://127.0.0.1:1", "down"), "-n", "")
	if len(got) != 0 || directive != ":1" {
		t.Errorf("cluster down: %q %s; want nothing, :1 (error)", got, directive)
	}
}

// TestCompletionScripts: kubectl cle completion writes the shells' scripts,
// which complete through kubectl-cle __complete.
func TestCompletionScripts(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		s, out, errOut := streams()
		if code := Main(context.Background(), []string{"completion", shell}, s); code != 0 {
			t.Fatalf("completion %s: exit %d, %s", shell, code, errOut.String())
		}
		if !strings.Contains(out.String(), "kubectl-cle") || !strings.Contains(out.String(), "__complete") {
			t.Errorf("completion %s: no script completing kubectl-cle through __complete:\n%.300s", shell, out.String())
		}
	}
	// Every command has its flags' completions, inherited from the root.
	s, _, _ := streams()
	root := NewCommand(s)
	for _, name := range []string{"status", "describe", "watch", "version"} {
		cmd := find(t, root, name)
		for _, flag := range []string{"namespace", "context", "cluster", "user"} {
			if _, ok := cmd.GetFlagCompletionFunc(flag); !ok {
				t.Errorf("%s --%s has no completion", name, flag)
			}
		}
	}
}
