package framework

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Main runs a test package against one Server: it starts the server with
// opts, hands it to setup, runs the tests, prints the server logs if any test
// failed, stops the server, and fails the run if a child process or the
// server's temporary directory is left behind. It does not return.
func Main(m *testing.M, opts Options, setup func(*Server)) {
	MainServers(m, []Options{opts}, func(s []*Server) { setup(s[0]) })
}

// MainServers is Main with one server per Options, started one after the
// other (for suites that run their cases against differently configured
// servers, such as both API modes).
func MainServers(m *testing.M, opts []Options, setup func([]*Server)) {
	os.Exit(run(m, opts, setup))
}

func run(m *testing.M, opts []Options, setup func([]*Server)) int {
	// kubectl and kubectl-cle cache discovery per host and port for hours:
	// a server of another test package, in another mode, may have had this
	// package's loopback port before. The package gets a cache of its own.
	cache, err := os.MkdirTemp("", "cle-kube-cache-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "framework: %v\n", err)
		return 1
	}
	defer os.RemoveAll(cache)
	if err := os.Setenv("KUBECACHEDIR", cache); err != nil {
		fmt.Fprintf(os.Stderr, "framework: %v\n", err)
		return 1
	}
	var servers []*Server
	stop := func() int {
		code := 0
		for _, s := range servers {
			if err := s.Stop(); err != nil {
				fmt.Fprintf(os.Stderr, "framework: stop control plane: %v\n", err)
				code = 1
			}
		}
		for _, s := range servers {
			if err := CheckClean(s); err != nil {
				fmt.Fprintf(os.Stderr, "framework: %v\n", err)
				code = 1
			}
		}
		return code
	}
	for _, o := range opts {
		if o.Logf == nil {
			o.Logf = func(format string, args ...any) {
				fmt.Fprintf(os.Stderr, "framework: "+format+"\n", args...)
			}
		}
		s, err := Start(context.Background(), o)
		if err != nil {
			fmt.Fprintf(os.Stderr, "framework: start control plane: %v\n", err)
			stop()
			return 1
		}
		servers = append(servers, s)
	}
	setup(servers)
	code := m.Run()
	if code != 0 {
		for _, s := range servers {
			s.DumpLogs(os.Stderr)
		}
		for _, o := range opts {
			if o.Epilogue != nil {
				fmt.Fprintln(os.Stderr, o.Epilogue())
			}
		}
	}
	return max(code, stop())
}

// CheckClean fails if this process has child processes left or the server's
// temporary directory still exists. Call it after Stop.
func CheckClean(s *Server) error {
	children, err := LiveChildren()
	if err != nil {
		return err
	}
	var problems []string
	if len(children) > 0 {
		problems = append(problems, "child processes left running: "+strings.Join(children, "; "))
	}
	if _, err := os.Stat(s.dir); !os.IsNotExist(err) {
		problems = append(problems, "temporary directory left behind: "+s.dir)
	}
	if len(problems) > 0 {
		return fmt.Errorf("not clean after the tests: %s", strings.Join(problems, "; "))
	}
	return nil
}

// CreateNamespace creates a namespace for one test, named after it, and
// deletes it when the test ends.
func (s *Server) CreateNamespace(t testing.TB) string {
	t.Helper()
	client := s.Client()
	ns, err := client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: namespacePrefix(t.Name())},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() {
		// No namespace controller runs here, so the namespace only turns
		// Terminating; the objects in it go away with etcd's data.
		_ = client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}

// namespacePrefix makes a DNS label prefix out of a test name.
func namespacePrefix(testName string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(testName) {
		switch {
		case r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r)):
			b.WriteRune(r)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
		if b.Len() >= 40 {
			break
		}
	}
	return strings.TrimSuffix(b.String(), "-") + "-"
}
