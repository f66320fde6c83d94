package candidate

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"

	"github.com/cle-dev/cle/internal/proof"
)

// ProofOfDeath says how this process can prove its own death: the container
// termination message file that the kubelet reads once the container has
// exited. With it, the process writes its instance ID (drawn when it starts)
// into that file, registers the ID on its LeaseCandidate and stamps every
// renewal of the Lease with it; cle-controller run with --proof-of-death
// then elects the next holder as soon as the kubelet reports this process's
// container terminated (crashed, OOM-killed, killed, restarted in place),
// instead of after the Lease expires. Nothing else changes: no extra writes,
// and without the controller's flag the stamp is ignored.
//
// The file then starts with a line "cle.dev/instance=<id>"; a message the
// application writes at exit should be appended to it, not replace it
// (replacing it only costs the early election). A Pod whose containers use
// terminationMessagePolicy FallbackToLogsOnError gets that line instead of
// the tail of the log on a failure.
type ProofOfDeath struct {
	// TerminationMessagePath is the container's termination message file
	// (its terminationMessagePath, /dev/termination-log by default), as this
	// process sees it. Empty turns the proof of death off.
	TerminationMessagePath string
	// Pod is "namespace/name" of the Pod: the controller takes a report of
	// this process's exit only from this Pod. Required with
	// TerminationMessagePath.
	Pod string
	// Container is the name of this process's container in the Pod: the
	// controller takes a report of this process's exit only for this
	// container, so that a sidecar, or a container added to debug the Pod,
	// cannot report it exited by writing its instance ID into its own
	// termination message. Empty: the container whose termination message
	// file the kubelet mounted at TerminationMessagePath, found in this
	// process's mounts (required where the file is not the kubelet's).
	Container string
	// Instance identifies this process; empty: one ID per process, drawn at
	// its start. Tests running several candidates in one process give each
	// its own. Must look like one NewInstance draws.
	Instance string
}

// NoProofOfDeath as Config.ProofOfDeath turns the proof of death off.
var NoProofOfDeath = &ProofOfDeath{}

// processInstance is this process's instance ID.
var processInstance = sync.OnceValue(proof.NewInstance)

// ErrNotInPod is returned by DetectProofOfDeath outside a Kubernetes Pod (or
// in one whose kubelet mounts no termination message file).
var ErrNotInPod = errors.New("not running in a Kubernetes container with a termination message file")

// mountinfo is where DetectProofOfDeath reads this process's mounts.
var mountinfo = "/proc/self/mountinfo"

// kubeletContainerFile matches the source of the mount the kubelet makes for
// a container's termination message file: a file of its own per container
// instance, under pods/<pod UID>/containers/<container name>/. The submatch
// is the container's name.
var kubeletContainerFile = regexp.MustCompile(`/pods/[0-9a-f-]+/containers/([^/]+)/[^/]+$`)

// DetectProofOfDeath finds the termination message file the kubelet mounted
// for this container, whatever its path, in this process's mounts, and the
// Pod from the environment: POD_NAMESPACE and POD_NAME when the Pod sets
// them (downward API), else the service account's namespace and the host
// name, which is the Pod's name unless the Pod sets spec.hostname.
func DetectProofOfDeath() (*ProofOfDeath, error) {
	m, err := kubeletMount("")
	if err != nil {
		return nil, err
	}
	return &ProofOfDeath{TerminationMessagePath: m.path, Pod: podFromEnvironment(), Container: m.container}, nil
}

// detected is DetectProofOfDeath, read once per process: its mounts and
// environment do not change, and every candidate of the process asks.
var detected = sync.OnceValues(DetectProofOfDeath)

// messageMount is a termination message file the kubelet mounted: where,
// and for which container.
type messageMount struct {
	path, container string
}

// terminationMessageMount finds, in a mountinfo listing, the kubelet's
// termination message file mounted at path (at any path when path is
// empty).
func terminationMessageMount(r io.Reader, path string) (messageMount, error) {
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for s.Scan() {
		// ID parent major:minor root mountpoint options ... - fstype source superoptions
		fields := strings.Fields(s.Text())
		if len(fields) < 5 {
			continue
		}
		m := kubeletContainerFile.FindStringSubmatch(unescapeMount(fields[3]))
		if m == nil {
			continue
		}
		if at := unescapeMount(fields[4]); path == "" || at == path {
			return messageMount{path: at, container: m[1]}, nil
		}
	}
	if err := s.Err(); err != nil {
		return messageMount{}, fmt.Errorf("%w: read %s: %w", ErrNotInPod, mountinfo, err)
	}
	return messageMount{}, ErrNotInPod
}

// kubeletMount is terminationMessageMount of this process's mounts.
func kubeletMount(path string) (messageMount, error) {
	f, err := os.Open(mountinfo)
	if err != nil {
		return messageMount{}, fmt.Errorf("%w: %w", ErrNotInPod, err)
	}
	defer func() { _ = f.Close() }()
	return terminationMessageMount(f, path)
}

// unescapeMount undoes mountinfo's octal escapes of space, tab, newline and
// backslash.
func unescapeMount(s string) string { return mountUnescaper.Replace(s) }

var mountUnescaper = strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)

// serviceAccountNamespace is the file that names the Pod's namespace in a
// Pod with a service account token mounted.
var serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

func podFromEnvironment() string {
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		if b, err := os.ReadFile(serviceAccountNamespace); err == nil {
			ns = strings.TrimSpace(string(b))
		}
	}
	name := os.Getenv("POD_NAME")
	if name == "" {
		name, _ = os.Hostname()
	}
	if ns == "" || name == "" {
		return ""
	}
	return ns + "/" + name
}

// completeProofOfDeath fills in the proof of death of a Config: detected
// when not set, turned off outside a Pod (or in one it cannot name).
func (c *Config) completeProofOfDeath() error {
	if c.ProofOfDeath == nil {
		p, err := detected()
		if err != nil || p.Pod == "" {
			c.ProofOfDeath = NoProofOfDeath
			return nil
		}
		c.ProofOfDeath = p
	}
	if c.ProofOfDeath.TerminationMessagePath == "" {
		return nil
	}
	if ns, name, ok := strings.Cut(c.ProofOfDeath.Pod, "/"); !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return fmt.Errorf("ProofOfDeath.Pod %q is not namespace/name: a report of this process's exit counts only from its own Pod", c.ProofOfDeath.Pod)
	}
	p := *c.ProofOfDeath
	if p.Container == "" {
		m, err := kubeletMount(p.TerminationMessagePath)
		if err != nil {
			return fmt.Errorf("ProofOfDeath.Container is not set, and no termination message file of the kubelet's is mounted at %s to name it: a report of this process's exit counts only for its own container: %w",
				p.TerminationMessagePath, err)
		}
		p.Container = m.container
	}
	if errs := validation.IsDNS1123Label(p.Container); len(errs) > 0 {
		return fmt.Errorf("ProofOfDeath.Container %q is not a container name: %s", p.Container, strings.Join(errs, "; "))
	}
	if p.Instance == "" {
		p.Instance = processInstance()
	}
	if !proof.ValidInstance(p.Instance) {
		return fmt.Errorf("ProofOfDeath.Instance %q is not 32 lowercase hexadecimal digits", p.Instance)
	}
	c.ProofOfDeath = &p
	return nil
}

// markerMu serializes the candidates of one process writing the marker.
var markerMu sync.Mutex

// writeMarker makes the termination message file name this process's
// instance, and returns the process to register: none when the file cannot
// be written (said in the log), since an instance the kubelet would not
// report proves nothing.
func (c *Candidate) writeMarker(ctx context.Context) proof.Process {
	p := c.cfg.ProofOfDeath
	if p == nil || p.TerminationMessagePath == "" {
		return proof.Process{}
	}
	markerMu.Lock()
	defer markerMu.Unlock()
	marker := proof.Marker(p.Instance)
	if err := appendOnce(p.TerminationMessagePath, marker); err != nil {
		klog.FromContext(ctx).Error(err, "Cannot write the termination message file; after a crash of this process the controller waits for the Lease to expire",
			"path", p.TerminationMessagePath)
		return proof.Process{}
	}
	klog.FromContext(ctx).V(2).Info("Proof of death: the kubelet will report this process's exit", "instance", p.Instance, "pod", p.Pod, "container", p.Container, "path", p.TerminationMessagePath)
	return proof.Process{Instance: p.Instance, Pod: p.Pod, Container: p.Container}
}

// appendOnce appends line to the file at path unless the file has it.
func appendOnce(path, line string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	// The kubelet reports the last 4096 bytes: the line must be among them.
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return err
	}
	if strings.Contains(string(b), line) {
		return nil
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		line = "\n" + line
	}
	if len(b)+len(line) > 4096 {
		return fmt.Errorf("the file holds %d bytes; the kubelet would not report a line past 4096", len(b))
	}
	_, err = f.WriteString(line)
	return err
}
