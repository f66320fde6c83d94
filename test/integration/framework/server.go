package framework

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// User is an identity the server authenticates by bearer token, for tests of
// authorization.
type User struct {
	Name   string
	Groups []string
}

// AdminUser is the user of Server.Config: a member of system:masters.
const AdminUser = "admin"

// Options configure a Server.
type Options struct {
	// CoordinatedLeaderElection turns the feature gate on and serves
	// coordination.k8s.io/v1beta1 (native mode). Off, kube-apiserver strips
	// spec.strategy and spec.preferredHolder from Leases (portable mode).
	CoordinatedLeaderElection bool
	// IdleBuiltinController keeps the election controller built into
	// kube-apiserver from acting, by holding its Lease. Only meaningful with
	// CoordinatedLeaderElection.
	IdleBuiltinController bool
	// PortableCRD installs the portable mode's LeaseCandidate CRD
	// (PortableCRDFile) and waits until it is served.
	PortableCRD bool
	// Users are authenticated by token in addition to AdminUser.
	Users []User
	// ExtraAPIServerFlags are appended to kube-apiserver's command line.
	ExtraAPIServerFlags []string
	// AdvertiseAddress, when set, is a non-loopback address of this host
	// that kube-apiserver serves on and publishes as the endpoint of the
	// kubernetes Service, for clients in Pods (the node test). By default it
	// serves on 127.0.0.1 and the Service has no endpoints.
	AdvertiseAddress string
	// ServiceAccountAdmission keeps the ServiceAccount admission plugin on,
	// so that Pods are given their ServiceAccount's token (the node test,
	// whose kube-controller-manager creates the ServiceAccounts).
	ServiceAccountAdmission bool
	// ReadyzExclude are /readyz checks not waited for: e.g. "informer-sync"
	// on a server whose built-in controllers wait for an API it was told not
	// to serve, which is then never ready but serves requests.
	ReadyzExclude []string
	// Logf receives progress messages; nil discards them.
	Logf func(format string, args ...any)
	// Epilogue, if set, is printed by Main after the servers' logs when a
	// test failed: what a long failure log should end with (the last lines
	// are what a CI summary shows).
	Epilogue func() string
}

// Timers of the election controller built into kube-apiserver. They are short
// so that it gives up fast once its Lease is taken, and elects fast when it is
// not idled.
const (
	BuiltinLeaseDuration = 4 * time.Second
	BuiltinRenewDeadline = 3 * time.Second
	BuiltinRetryPeriod   = 500 * time.Millisecond
)

// ServiceClusterIPRange is the Services' address range; the kubernetes
// Service is its first address, 10.0.0.1.
const ServiceClusterIPRange = "10.0.0.0/24"

// Server is a running etcd and kube-apiserver.
type Server struct {
	opts   Options
	dir    string
	tokens map[string]string // user name -> bearer token

	etcd      *process
	etcdURL   string
	apiserver *process
	url       string
	caFile    string

	idler *idler

	stopOnce sync.Once
	stopErr  error
}

// Start starts etcd and kube-apiserver and waits until the server is ready
// (and, if asked, the built-in controller is idle). On error everything
// started so far is stopped again.
func Start(ctx context.Context, opts Options) (_ *Server, err error) {
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if opts.IdleBuiltinController && !opts.CoordinatedLeaderElection {
		return nil, errors.New("IdleBuiltinController needs CoordinatedLeaderElection")
	}
	etcdBin, err := Binary("etcd")
	if err != nil {
		return nil, err
	}
	apiserverBin, err := Binary("kube-apiserver")
	if err != nil {
		return nil, err
	}
	removeStaleDirs()
	dir, err := os.MkdirTemp("", tempDirPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return nil, fmt.Errorf("create temp dir: %w", err)
	}
	s := &Server{opts: opts, dir: dir, tokens: map[string]string{}}
	defer func() {
		if err != nil {
			s.DumpLogs(os.Stderr)
			_ = s.Stop()
		}
	}()

	if err := s.startEtcd(ctx, etcdBin); err != nil {
		return nil, err
	}
	if err := s.writeAPIServerFiles(); err != nil {
		return nil, err
	}
	if err := s.startAPIServer(ctx, apiserverBin); err != nil {
		return nil, err
	}
	if opts.IdleBuiltinController {
		begin := time.Now()
		s.idler, err = startIdler(ctx, s.idlerConfig(), opts.Logf)
		if err != nil {
			return nil, err
		}
		opts.Logf("built-in election controller idled in %s", time.Since(begin).Round(time.Millisecond))
	}
	if opts.PortableCRD {
		begin := time.Now()
		crdCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if err := s.InstallCRD(crdCtx, PortableCRDFile); err != nil {
			return nil, err
		}
		opts.Logf("portable CRD installed in %s", time.Since(begin).Round(time.Millisecond))
	}
	return s, nil
}

const tempDirPrefix = "cle-integration-"

// removeStaleDirs deletes the temp dirs of earlier test processes that died
// without cleaning up (their pid is in the name and no longer runs).
func removeStaleDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), tempDirPrefix+"*"))
	for _, dir := range dirs {
		pid, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(filepath.Base(dir), tempDirPrefix), "-", 2)[0])
		if err != nil || syscall.Kill(pid, 0) == nil {
			continue
		}
		_ = os.RemoveAll(dir)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// FreeAddress is a loopback address ("127.0.0.1:port") whose port was free a
// moment ago, for a test to serve on.
func FreeAddress(t testing.TB) string {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// retryPorts runs start with fresh ports until it succeeds or fails for a
// reason other than a port taken in the meantime by somebody else.
func retryPorts(start func() error) error {
	var err error
	for range 3 {
		if err = start(); err == nil || !errors.Is(err, errPortTaken) {
			return err
		}
	}
	return err
}

var errPortTaken = errors.New("port already in use")

func (s *Server) startEtcd(ctx context.Context, bin string) error {
	return retryPorts(func() error {
		clientPort, err := freePort()
		if err != nil {
			return err
		}
		peerPort, err := freePort()
		if err != nil {
			return err
		}
		client := fmt.Sprintf("http://127.0.0.1:%d", clientPort)
		peer := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
		s.etcd = newProcess("etcd", bin, filepath.Join(s.dir, "etcd.log"), []string{
			"--name=default",
			"--data-dir=" + filepath.Join(s.dir, "etcd"),
			"--listen-client-urls=" + client,
			"--advertise-client-urls=" + client,
			"--listen-peer-urls=" + peer,
			"--initial-advertise-peer-urls=" + peer,
			"--initial-cluster=default=" + peer,
			"--log-level=warn",
			// Test data is thrown away: do not pay for fsync.
			"--unsafe-no-fsync",
		})
		s.etcdURL = client
		if err := s.etcd.start(); err != nil {
			return err
		}
		return s.waitReady(ctx, s.etcd, "etcd", http.DefaultClient, client+"/health", 30*time.Second)
	})
}

func (s *Server) writeAPIServerFiles() error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("generate service account key: %w", err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := os.WriteFile(s.ServiceAccountKeyFile(), keyPEM, 0o600); err != nil {
		return fmt.Errorf("write service account key: %w", err)
	}
	var lines []string
	users := append([]User{{Name: AdminUser, Groups: []string{"system:masters"}}}, s.opts.Users...)
	for _, u := range users {
		if _, dup := s.tokens[u.Name]; dup || u.Name == "" || strings.ContainsAny(u.Name, ",\"\n") {
			return fmt.Errorf("invalid or duplicate user %q", u.Name)
		}
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			return fmt.Errorf("generate token: %w", err)
		}
		token := hex.EncodeToString(b)
		s.tokens[u.Name] = token
		lines = append(lines, fmt.Sprintf("%s,%s,%s,%q", token, u.Name, u.Name, strings.Join(u.Groups, ",")))
	}
	if err := os.WriteFile(filepath.Join(s.dir, "tokens.csv"), []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		return fmt.Errorf("write token file: %w", err)
	}
	return nil
}

func (s *Server) startAPIServer(ctx context.Context, bin string) error {
	return retryPorts(func() error {
		port, err := freePort()
		if err != nil {
			return err
		}
		certDir := filepath.Join(s.dir, "certs")
		address := s.opts.AdvertiseAddress
		if address == "" {
			address = "127.0.0.1"
		}
		args := []string{"--etcd-servers=" + s.etcdURL, "--bind-address=" + address, "--advertise-address=" + address}
		if s.opts.AdvertiseAddress == "" {
			// No endpoints for the kubernetes Service: nothing here needs
			// them, and from 1.37 the reconciler refuses a loopback address.
			args = append(args, "--endpoint-reconciler-type=none")
		}
		if !s.opts.ServiceAccountAdmission {
			args = append(args, "--disable-admission-plugins=ServiceAccount")
		}
		args = append(args,
			"--secure-port="+strconv.Itoa(port),
			"--cert-dir="+certDir,
			"--token-auth-file="+filepath.Join(s.dir, "tokens.csv"),
			"--authorization-mode=RBAC",
			"--service-account-issuer=https://kubernetes.default.svc",
			"--service-account-key-file="+s.ServiceAccountKeyFile(),
			"--service-account-signing-key-file="+s.ServiceAccountKeyFile(),
			"--service-cluster-ip-range="+ServiceClusterIPRange,
			"--profiling=false",
			// On SIGTERM, end open watches within a second: otherwise the
			// server waits out its whole shutdown timeout (a minute) for
			// clients' watches to end by themselves.
			"--shutdown-watch-termination-grace-period=1s",
			"--v=1",
		)
		if s.opts.CoordinatedLeaderElection {
			args = append(args,
				"--feature-gates=CoordinatedLeaderElection=true",
				"--runtime-config=coordination.k8s.io/v1beta1=true",
				"--coordinated-leadership-lease-duration="+BuiltinLeaseDuration.String(),
				"--coordinated-leadership-renew-deadline="+BuiltinRenewDeadline.String(),
				"--coordinated-leadership-retry-period="+BuiltinRetryPeriod.String(),
			)
		} else {
			args = append(args, "--feature-gates=CoordinatedLeaderElection=false")
		}
		args = append(args, s.opts.ExtraAPIServerFlags...)
		s.apiserver = newProcess("kube-apiserver", bin, filepath.Join(s.dir, "kube-apiserver.log"), args)
		// The self-signed certificate names the advertised address.
		s.url = fmt.Sprintf("https://%s:%d", address, port)
		// The self-signed serving certificate file holds the certificate and
		// the CA that signed it.
		s.caFile = filepath.Join(certDir, "apiserver.crt")
		return s.runAPIServer(ctx)
	})
}

// runAPIServer starts the kube-apiserver process as configured and waits for
// /readyz.
func (s *Server) runAPIServer(ctx context.Context) error {
	begin := time.Now()
	if err := s.apiserver.start(); err != nil {
		return err
	}
	// Until the serving certificate exists, /readyz is probed without
	// verifying it; only the status matters here.
	probe := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	readyz := s.url + "/readyz"
	if len(s.opts.ReadyzExclude) > 0 {
		readyz += "?" + url.Values{"exclude": s.opts.ReadyzExclude}.Encode()
	}
	if err := s.waitReady(ctx, s.apiserver, "kube-apiserver", probe, readyz, 60*time.Second); err != nil {
		return err
	}
	s.opts.Logf("kube-apiserver ready at %s in %s", s.url, time.Since(begin).Round(time.Millisecond))
	return nil
}

// waitReady polls url until it answers 200, the process exits, or the
// deadline passes.
func (s *Server) waitReady(ctx context.Context, p *process, name string, client *http.Client, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ticker := time.NewTicker(50 * time.Millisecond)
	defer ticker.Stop()
	var last string
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if token := s.tokens[AdminUser]; token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, body)
		} else {
			last = err.Error()
		}
		select {
		case <-p.Exited():
			if strings.Contains(s.readLog(p), "address already in use") {
				return fmt.Errorf("%s exited: %w", name, errPortTaken)
			}
			return fmt.Errorf("%s exited before it was ready; its log is %s", name, p.logPath)
		case <-ctx.Done():
			_ = p.stop(5 * time.Second)
			return fmt.Errorf("%s not ready at %s within %s (last answer: %s): %w", name, url, timeout, last, ctx.Err())
		case <-ticker.C:
		}
	}
}

func (s *Server) readLog(p *process) string {
	data, _ := os.ReadFile(p.logPath)
	return string(data)
}

// URL is the kube-apiserver's address.
func (s *Server) URL() string { return s.url }

// Dir is the server's temporary directory (logs, kubeconfig, etcd data).
func (s *Server) Dir() string { return s.dir }

// CAFile is the file of the CA that signed kube-apiserver's serving
// certificate (the certificate itself: it is self-signed).
func (s *Server) CAFile() string { return s.caFile }

// ServiceAccountKeyFile is the key that signs and verifies ServiceAccount
// tokens (kube-controller-manager's --service-account-private-key-file).
func (s *Server) ServiceAccountKeyFile() string { return filepath.Join(s.dir, "sa.key") }

// EtcdURL is etcd's client address.
func (s *Server) EtcdURL() string { return s.etcdURL }

// Config returns a new admin (system:masters) client config.
func (s *Server) Config() *rest.Config {
	cfg, err := s.UserConfig(AdminUser)
	if err != nil {
		panic(err) // the admin user always exists
	}
	return cfg
}

// UserConfig returns a new client config that authenticates as one of
// Options.Users.
func (s *Server) UserConfig(user string) (*rest.Config, error) {
	token, ok := s.tokens[user]
	if !ok {
		return nil, fmt.Errorf("no user %q: add it to Options.Users", user)
	}
	return &rest.Config{
		Host:            s.url,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAFile: s.caFile},
		QPS:             -1, // no client-side throttling against a test server
		UserAgent:       "cle-integration/" + user,
	}, nil
}

// Client returns an admin clientset.
func (s *Server) Client() kubernetes.Interface {
	return kubernetes.NewForConfigOrDie(s.Config())
}

// WriteKubeconfig writes a kubeconfig for the admin user to path.
func (s *Server) WriteKubeconfig(path string) error {
	return s.WriteUserKubeconfig(path, AdminUser)
}

// WriteUserKubeconfig writes a kubeconfig for one of Options.Users to path.
func (s *Server) WriteUserKubeconfig(path, user string) error {
	token, ok := s.tokens[user]
	if !ok {
		return fmt.Errorf("no user %q: add it to Options.Users", user)
	}
	return s.WriteTokenKubeconfig(path, s.url, token)
}

// WriteTokenKubeconfig writes to path a kubeconfig that authenticates with
// the bearer token to kube-apiserver at url: its own (URL), or an address
// that leads to it, such as a Gate's ("https://" + gate.Addr()).
func (s *Server) WriteTokenKubeconfig(path, url, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["cle"] = &clientcmdapi.Cluster{Server: url, CertificateAuthority: s.caFile}
	cfg.AuthInfos["user"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["cle"] = &clientcmdapi.Context{Cluster: "cle", AuthInfo: "user", Namespace: "default"}
	cfg.CurrentContext = "cle"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}

// StopAPIServer stops kube-apiserver, leaving etcd and its data in place.
func (s *Server) StopAPIServer() error {
	return s.apiserver.stop(30 * time.Second)
}

// StartAPIServer starts kube-apiserver again on the same port and etcd data,
// after StopAPIServer, and waits until it is ready.
func (s *Server) StartAPIServer(ctx context.Context) error {
	return s.runAPIServer(ctx)
}

// RestartAPIServer stops and starts kube-apiserver.
func (s *Server) RestartAPIServer(ctx context.Context) error {
	if err := s.StopAPIServer(); err != nil {
		return err
	}
	return s.StartAPIServer(ctx)
}

// RestartEtcd stops etcd (SIGTERM) and starts it again on the same ports and
// data, and waits until it is healthy. kube-apiserver keeps running and
// reconnects by itself; requests fail meanwhile.
func (s *Server) RestartEtcd(ctx context.Context) error {
	if err := s.etcd.stop(30 * time.Second); err != nil {
		return err
	}
	if err := s.etcd.start(); err != nil {
		return err
	}
	return s.waitReady(ctx, s.etcd, "etcd", http.DefaultClient, s.etcdURL+"/health", 30*time.Second)
}

// PauseAPIServer freezes kube-apiserver with SIGSTOP: connections stay open
// but nothing is answered, as with a hung server. It returns once every
// thread of kube-apiserver has stopped.
func (s *Server) PauseAPIServer() error { return s.apiserver.pause() }

// ResumeAPIServer undoes PauseAPIServer with SIGCONT.
func (s *Server) ResumeAPIServer() error { return s.apiserver.signal(syscall.SIGCONT) }

// PauseEtcd freezes etcd with SIGSTOP, as a disk that stops answering
// fsync does: kube-apiserver's writes, and the watches that wait for them,
// hang until ResumeEtcd.
func (s *Server) PauseEtcd() error { return s.etcd.pause() }

// ResumeEtcd undoes PauseEtcd with SIGCONT.
func (s *Server) ResumeEtcd() error { return s.etcd.signal(syscall.SIGCONT) }

// APIServerPID is the pid of the running kube-apiserver (0 if none).
func (s *Server) APIServerPID() int { return s.apiserver.pid() }

// BuiltinControllerIdled reports whether the built-in election controller is
// being kept idle.
func (s *Server) BuiltinControllerIdled() bool { return s.idler != nil }

// DumpLogs writes both server logs to w.
func (s *Server) DumpLogs(w io.Writer) {
	for _, p := range []*process{s.etcd, s.apiserver} {
		if p == nil {
			continue
		}
		fmt.Fprintf(w, "\n===== %s log (%s) =====\n%s\n", p.name, p.logPath, s.readLog(p))
	}
}

// Stop stops the idler, kube-apiserver and etcd, and removes the temporary
// directory. It is safe to call more than once.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		var errs []error
		if s.idler != nil {
			s.idler.stop()
		}
		for _, p := range []*process{s.apiserver, s.etcd} {
			if p != nil {
				errs = append(errs, p.stop(30*time.Second))
			}
		}
		if err := os.RemoveAll(s.dir); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", s.dir, err))
		}
		s.stopErr = errors.Join(errs...)
	})
	return s.stopErr
}

// MustClient returns a clientset for cfg and panics on a malformed config.
func MustClient(cfg *rest.Config) kubernetes.Interface {
	return kubernetes.NewForConfigOrDie(cfg)
}
