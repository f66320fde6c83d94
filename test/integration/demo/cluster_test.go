package demo

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/cle-dev/cle/test/integration/framework"
)

const testImage = "registry.example.com/cle:v0.0.0-test"

// clusterRun is one run of make run's cluster mode (local-up --cluster)
// against a test server, as a cluster's kubeconfig.
type clusterRun struct {
	server     *framework.Server
	client     kubernetes.Interface
	kubeconfig string
	bin        string
}

func newClusterRun(t *testing.T) *clusterRun {
	t.Helper()
	bin := buildDemo(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	server, err := framework.Start(ctx, framework.Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := server.Stop(); err != nil {
			t.Errorf("stop the server: %v", err)
		}
	})
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := server.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	return &clusterRun{server: server, client: framework.MustClient(server.Config()), kubeconfig: kubeconfig, bin: bin}
}

// run runs local-up --cluster to its end and returns its transcript.
func (r *clusterRun) run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(r.bin, "local-up"), append([]string{
		"--cluster", "--bin-dir=" + r.bin, "--manifests=" + framework.RepoPath("manifests"),
		"--image=" + testImage, "--exit-after-demo", "--step-pause=0", "--log-dir=" + filepath.Join(t.TempDir(), "logs"),
	}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+r.kubeconfig)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// checkCleanedUp checks that what the run created is gone: Deployments
// deleted, namespaces being deleted (this server has no namespace
// controller to finish the job).
func (r *clusterRun) checkCleanedUp(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	for _, d := range [][2]string{{"cle-system", "cle-controller"}, {"cle-example", "example-candidate"}} {
		if _, err := r.client.AppsV1().Deployments(d[0]).Get(ctx, d[1], metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("Deployment %s/%s after the run: %v, want it deleted", d[0], d[1], err)
		}
	}
	for _, name := range []string{"cle-system", "cle-example"} {
		ns, err := r.client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		if err == nil && ns.DeletionTimestamp == nil {
			t.Errorf("namespace %s is not being deleted after the run", name)
		}
	}
	if _, err := r.client.RbacV1().ClusterRoles().Get(ctx, "cle-controller", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ClusterRole cle-controller after the run: %v, want it deleted", err)
	}
}

// TestClusterMode runs the demonstration in cluster mode to its end: the
// manifests are applied to a real kube-apiserver, and a stand-in for the
// cluster's nodes runs their Deployments' Pods as processes of the binaries
// the image holds, with the containers' command and args. The election, the
// rolling upgrade of the example Deployment and the cleanup on exit are
// checked.
func TestClusterMode(t *testing.T) {
	r := newClusterRun(t)
	node := &fakeNode{t: t, client: r.client, kubeconfig: r.kubeconfig, binDir: r.bin, logDir: t.TempDir(),
		pods: map[string][]*fakePod{}, images: map[string]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	nodeDone := make(chan struct{})
	go func() {
		defer close(nodeDone)
		node.run(ctx, "cle-system/cle-controller", "cle-example/example-candidate")
	}()
	defer func() { cancel(); <-nodeDone; node.stopAll() }()

	transcript, err := r.run(t)
	if err != nil {
		t.Fatalf("local-up --cluster: %v\n%s\nnode: %s", err, transcript, node.logs())
	}
	checkSays(t, transcript,
		"Installing cle-controller in portable mode",
		"deployment cle-system/cle-controller created",
		"customresourcedefinition leasecandidates.cle.dev created",
		"Deploying 3 replicas of the example component at version 1.35.0",
		"Rolling upgrade of the Deployment to 1.36.0",
		"Deleting the ")
	if !regexp.MustCompile(`Upgrade done: example-candidate-\S+ leads at 1\.36\.0`).MatchString(transcript) {
		t.Error("the transcript does not end the upgrade with a 1.36.0 replica leading")
	}
	// The watch showed an old replica leading, then an upgraded one.
	holders := regexp.MustCompile(`\[watch\] .* holder (?:\S+ -> )?(example-candidate-\S+) \(term`).FindAllStringSubmatch(transcript, -1)
	var hashes []string
	for _, m := range holders {
		h := strings.Split(m[1], "-")[2]
		if len(hashes) == 0 || hashes[len(hashes)-1] != h {
			hashes = append(hashes, h)
		}
	}
	if len(hashes) != 2 {
		t.Errorf("the watch showed holders of %d templates in turn (%v), want 2: the old until none is left, then the new", len(hashes), hashes)
	}
	if got := node.imageList(); got != testImage {
		t.Errorf("the Deployments' images: %q, want only %s", got, testImage)
	}
	// The Deployments are gone, so the node stops their Pods.
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return node.podCount() == 0, nil
	}); err != nil {
		t.Errorf("Pods still running after the run: %d", node.podCount())
	}
	r.checkCleanedUp(t)
	if t.Failed() {
		t.Logf("transcript:\n%s\nnode: %s", transcript, node.logs())
	}
}

// TestClusterModeNoPods runs cluster mode where nothing runs the Pods (an
// image the cluster cannot pull looks the same): it fails after the rollout
// timeout, says what to do, and still deletes what it created, but not the
// CRD, which was there before.
func TestClusterModeNoPods(t *testing.T) {
	r := newClusterRun(t)
	if err := r.server.InstallCRD(t.Context(), "manifests/crd/leasecandidates.cle.dev.yaml"); err != nil {
		t.Fatal(err)
	}
	transcript, err := r.run(t, "--rollout-timeout=2s")
	if err == nil {
		t.Fatalf("local-up --cluster succeeded with nothing running its Pods:\n%s", transcript)
	}
	checkSays(t, transcript,
		"customresourcedefinition leasecandidates.cle.dev configured",
		"Deployment cle-system/cle-controller has not 1 available replicas after 2s",
		"Pods of cle-system/cle-controller: 0",
		"The cluster must be able to pull "+testImage+": make image",
		"Deleting the ")
	r.checkCleanedUp(t)
	dyn, err := dynamic.NewForConfig(r.server.Config())
	if err != nil {
		t.Fatal(err)
	}
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	if crd, err := crds.Get(t.Context(), "leasecandidates.cle.dev", metav1.GetOptions{}); err != nil || crd.GetDeletionTimestamp() != nil {
		t.Errorf("the CRD, installed before the run, after it: %v (deleting: %v), want it kept", err, err == nil && crd.GetDeletionTimestamp() != nil)
	}
	if t.Failed() {
		t.Logf("transcript:\n%s", transcript)
	}
}

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// buildDemo builds local-up and the binaries it runs, once per test binary.
func buildDemo(t *testing.T) string {
	t.Helper()
	if _, err := framework.BinDir(); err != nil { // kube-apiserver, etcd, kubectl
		t.Fatal(err)
	}
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "cle-demo-bin-")
		if buildErr != nil {
			return
		}
		cmd := framework.GoBuild("-o", buildDir+"/",
			"./hack/local-up", "./cmd/cle-controller", "./cmd/kubectl-cle", "./examples/candidate")
		cmd.Dir = framework.RepoPath(".")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("%w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatalf("build: %v", buildErr)
	}
	return buildDir
}

// fakeNode stands in for what the test server lacks to run a Deployment
// (the Deployment controller, a scheduler, a kubelet): it runs each watched
// Deployment's Pods as local processes of the image's binaries (the
// container's command, else the image's entrypoint cle-controller), with its
// args, replaces one Pod at a time when the template changes (maxUnavailable
// 1, maxSurge 0, as the manifests ask), and writes the Deployment's status.
// The processes use the admin kubeconfig (there is no in-cluster config) and
// loopback ports chosen by the kernel.
type fakeNode struct {
	t          *testing.T
	client     kubernetes.Interface
	kubeconfig string
	binDir     string
	logDir     string

	mu     sync.Mutex
	pods   map[string][]*fakePod // by namespace/name of the Deployment
	images map[string]bool
	events []string
}

type fakePod struct {
	name, hash string
	grace      time.Duration
	child      *framework.Child
}

func (n *fakeNode) run(ctx context.Context, deployments ...string) {
	ticker := time.NewTicker(100 * time.Millisecond)
	defer ticker.Stop()
	for {
		for _, key := range deployments {
			n.sync(ctx, key)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// note records what the node did, for a failure's log.
func (n *fakeNode) note(what string, details ...any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.events = append(n.events, time.Now().Format("15:04:05.000 ")+what+" "+fmt.Sprint(details...))
}

func (n *fakeNode) logs() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return "\n" + strings.Join(n.events, "\n")
}

// sync takes one step towards the Deployment's spec and writes its status.
func (n *fakeNode) sync(ctx context.Context, key string) {
	ns, name, _ := strings.Cut(key, "/")
	d, err := n.client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		for _, p := range n.take(key) {
			n.stop(p)
		}
		return
	}
	if err != nil {
		return
	}
	hash := templateHash(d)
	n.mu.Lock()
	var alive []*fakePod
	var exited []string
	for _, p := range n.pods[key] {
		select {
		case <-p.child.Exited():
			exited = append(exited, p.name) // replaced, as a kubelet restarts it
		default:
			alive = append(alive, p)
		}
	}
	n.pods[key] = alive
	n.mu.Unlock()
	for _, name := range exited {
		n.note("pod exited by itself: ", name)
	}
	want := int(ptrInt(d.Spec.Replicas))
	var old *fakePod
	for _, p := range alive {
		if p.hash != hash {
			old = p
			break
		}
	}
	switch {
	case len(alive) > want:
		n.remove(key, alive[len(alive)-1])
	case len(alive) < want:
		if err := n.start(key, d, hash); err != nil {
			n.note("start a pod of ", key, ": ", err)
		}
	case old != nil:
		n.remove(key, old)
	}
	n.mu.Lock()
	pods := n.pods[key]
	updated := 0
	for _, p := range pods {
		if p.hash == hash {
			updated++
		}
	}
	n.mu.Unlock()
	d.Status = appsv1.DeploymentStatus{
		ObservedGeneration: d.Generation, Replicas: int32(len(pods)), UpdatedReplicas: int32(updated),
		ReadyReplicas: int32(len(pods)), AvailableReplicas: int32(len(pods)),
	}
	_, _ = n.client.AppsV1().Deployments(ns).UpdateStatus(ctx, d, metav1.UpdateOptions{}) // a conflict: next tick
}

func ptrInt(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}

func templateHash(d *appsv1.Deployment) string {
	b, _ := json.Marshal(d.Spec.Template)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:6]
}

var bindFlags = regexp.MustCompile(`^(--metrics-bind-address|--health-probe-bind-address|--health-addr)=`)

func (n *fakeNode) start(key string, d *appsv1.Deployment, hash string) error {
	spec := d.Spec.Template.Spec
	ctr := spec.Containers[0]
	podName := d.Name + "-" + hash + "-" + utilrand.String(5)
	bin := "cle-controller"
	if len(ctr.Command) > 0 {
		bin = path.Base(ctr.Command[0])
	}
	env := map[string]string{}
	for _, e := range ctr.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				env[e.Name] = podName
			case "metadata.namespace":
				env[e.Name] = d.Namespace
			}
		} else {
			env[e.Name] = e.Value
		}
	}
	args := []string{"--kubeconfig=" + n.kubeconfig}
	for _, a := range ctr.Args {
		for k, v := range env {
			a = strings.ReplaceAll(a, "$("+k+")", v)
		}
		if m := bindFlags.FindString(a); m != "" {
			a = m + "127.0.0.1:0"
		}
		args = append(args, a)
	}
	child, err := framework.StartProcess(podName, filepath.Join(n.binDir, bin), filepath.Join(n.logDir, podName+".log"), args...)
	if err != nil {
		return err
	}
	grace := 30 * time.Second
	if spec.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	}
	n.mu.Lock()
	n.pods[key] = append(n.pods[key], &fakePod{name: podName, hash: hash, grace: grace, child: child})
	n.images[ctr.Image] = true
	n.mu.Unlock()
	n.note("pod started: ", podName, " ", bin, " ", strings.Join(args, " "))
	return nil
}

// remove stops one Pod of the Deployment, gracefully, as a kubelet does.
func (n *fakeNode) remove(key string, p *fakePod) {
	n.mu.Lock()
	pods := n.pods[key]
	for i, q := range pods {
		if q == p {
			n.pods[key] = append(pods[:i:i], pods[i+1:]...)
			break
		}
	}
	n.mu.Unlock()
	n.stop(p)
}

func (n *fakeNode) stop(p *fakePod) {
	if err := p.child.Stop(p.grace); err != nil {
		n.note("stop ", p.name, ": ", err)
	}
	n.note("pod stopped: ", p.name)
}

func (n *fakeNode) take(key string) []*fakePod {
	n.mu.Lock()
	defer n.mu.Unlock()
	pods := n.pods[key]
	delete(n.pods, key)
	return pods
}

func (n *fakeNode) stopAll() {
	n.mu.Lock()
	var keys []string
	for k := range n.pods {
		keys = append(keys, k)
	}
	n.mu.Unlock()
	for _, k := range keys {
		for _, p := range n.take(k) {
			n.stop(p)
		}
	}
}

func (n *fakeNode) podCount() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := 0
	for _, pods := range n.pods {
		c += len(pods)
	}
	return c
}

func (n *fakeNode) imageList() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var images []string
	for i := range n.images {
		images = append(images, i)
	}
	return strings.Join(images, " ")
}
