package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// demo runs the election and the rolling upgrade.
type demo struct {
	o          options
	ctx        context.Context
	kubeconfig string
	client     kubernetes.Interface
	children   *[]*child
	// live maps each running replica's identity to its version.
	live map[string]string
	// liveFrom, if set, tells the live replicas instead of live: in a
	// cluster, from their LeaseCandidates.
	liveFrom func(context.Context) (map[string]string, error)
	// pathEnv puts bin/ (kubectl-cle) and kubectl on PATH.
	pathEnv string
	kubectl string
	// pluginArgs go to every kubectl cle command.
	pluginArgs []string
	// lastErr is why the last poll's check could not tell.
	lastErr error
}

// stepTimeout bounds each wait of the demonstration: elections take
// milliseconds, a handover on shutdown well under a second.
const stepTimeout = time.Minute

func (d *demo) startWatch(kubectl string) error {
	binDir, err := filepath.Abs(d.o.binDir)
	if err != nil {
		return err
	}
	d.pathEnv = "PATH=" + binDir + string(os.PathListSeparator) + filepath.Dir(kubectl) + string(os.PathListSeparator) + os.Getenv("PATH")
	d.kubectl = kubectl
	c, err := startCommand(d.o, "watch", d.kubectl, d.env(), append([]string{"cle", "watch", "-n", d.o.namespace, d.o.lease}, d.pluginArgs...)...)
	if err != nil {
		return fmt.Errorf("start kubectl cle watch: %w", err)
	}
	*d.children = append(*d.children, c)
	// The watch prints the Lease's state once it has listed it: only then can
	// it show the first election.
	select {
	case <-c.printed:
	case <-time.After(stepTimeout):
		return fmt.Errorf("kubectl cle watch printed nothing within %s (see %s)", stepTimeout, c.log.Name())
	case <-d.ctx.Done():
		return d.ctx.Err()
	}
	select {
	case <-c.exited:
		return fmt.Errorf("kubectl cle watch exited: %v (see %s)", c.err, c.log.Name())
	default:
	}
	return nil
}

func (d *demo) run() error {
	say("Starting %d replicas of an example component at version %s; they register LeaseCandidates and the controller elects one.", d.o.candidates, oldVersion)
	for _, name := range replicas[:d.o.candidates] {
		if err := d.startReplica(name, oldVersion); err != nil {
			return err
		}
	}
	if _, err := d.waitForRightLeader(); err != nil {
		return err
	}
	d.status()
	if !d.o.upgrade {
		return nil
	}
	if err := d.pause(); err != nil {
		return err
	}
	say("Rolling upgrade to %s, one replica at a time, the leader first: leadership must stay on a %s replica while one is left.", newVersion, oldVersion)
	for i := range d.o.candidates {
		leader, err := d.leader()
		if err != nil {
			return err
		}
		old := leader
		if d.live[old] != oldVersion {
			// The leader is already upgraded: take the next old replica.
			for name, v := range d.live {
				if v == oldVersion {
					old = name
					break
				}
			}
		}
		say("Step %d/%d: stopping %s (%s%s); it hands the Lease over as it stops.", i+1, d.o.candidates, old, d.live[old], leaderMark(old == leader))
		if err := d.stopReplica(old); err != nil {
			return err
		}
		name := strings.Split(old, "-v")[0] + "-v" + strings.ReplaceAll(strings.TrimSuffix(newVersion, ".0"), ".", "-")
		say("Step %d/%d: starting %s at %s in its place.", i+1, d.o.candidates, name, newVersion)
		if err := d.startReplica(name, newVersion); err != nil {
			return err
		}
		if _, err := d.waitForRightLeader(); err != nil {
			return err
		}
		d.status()
		if err := d.pause(); err != nil {
			return err
		}
	}
	leader, err := d.leader()
	if err != nil {
		return err
	}
	say("Upgrade done: %s leads at %s, and no leader was ever newer than a live replica.", leader, d.live[leader])
	return nil
}

func leaderMark(leads bool) string {
	if leads {
		return ", the leader"
	}
	return ""
}

func (d *demo) startReplica(name, v string) error {
	c, err := startChild(d.o, name, "candidate",
		"--kubeconfig="+d.kubeconfig, "--namespace="+d.o.namespace, "--lease="+d.o.lease,
		"--identity="+name, "--binary-version="+v, "--emulation-version="+v)
	if err != nil {
		return err
	}
	*d.children = append(*d.children, c)
	d.live[name] = v
	// Registered: its LeaseCandidate exists.
	return d.poll(fmt.Sprintf("%s to register", name), func(ctx context.Context) (bool, error) {
		lcs, err := d.candidateNames(ctx)
		return slices.Contains(lcs, name), err
	})
}

func (d *demo) stopReplica(name string) error {
	for i, c := range *d.children {
		if c.name == name {
			c.stop(func(format string, args ...any) { fmt.Fprintf(os.Stderr, "local-up: "+format+"\n", args...) })
			*d.children = slices.Delete(*d.children, i, i+1)
			break
		}
	}
	delete(d.live, name)
	return nil
}

// waitForRightLeader waits until the Lease names a live replica of the
// oldest version among the live ones, and fails if it ever names one newer
// than a live replica.
func (d *demo) waitForRightLeader() (string, error) {
	var leader string
	err := d.poll("a leader at the oldest version live", func(ctx context.Context) (bool, error) {
		l, right, err := d.checkLeader(ctx)
		leader = l
		return right, err
	})
	return leader, err
}

// checkLeader reads the Lease's holder and reports whether it is a live
// replica of the oldest version live; it fails if the holder is a live
// replica newer than another live one.
func (d *demo) checkLeader(ctx context.Context) (string, bool, error) {
	// The Lease first: a replica that stops deletes its LeaseCandidate before
	// it hands the Lease over, so a holder read first and found live among
	// the candidates read next was live when it held.
	l, err := d.leader()
	if err != nil || l == "" {
		return "", false, nil
	}
	live := d.live
	if d.liveFrom != nil {
		if live, err = d.liveFrom(ctx); err != nil {
			return "", false, nil // transient: poll again
		}
	}
	oldest := ""
	for _, v := range live {
		if oldest == "" || version.MustParseSemantic(v).LessThan(version.MustParseSemantic(oldest)) {
			oldest = v
		}
	}
	v, isLive := live[l]
	if isLive && v != oldest {
		return "", false, fmt.Errorf("the Lease names %s at %s while a replica at %s is live: a leader newer than a peer", l, v, oldest)
	}
	return l, isLive, nil
}

// leader is the Lease's holder ("" if none).
func (d *demo) leader() (string, error) {
	lease, err := d.client.CoordinationV1().Leases(d.o.namespace).Get(d.ctx, d.o.lease, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return ptr.Deref(lease.Spec.HolderIdentity, ""), nil
}

// candidateNames lists the LeaseCandidates in the namespace, of whichever
// API the server serves (the CRD in portable mode).
func (d *demo) candidateNames(ctx context.Context) ([]string, error) {
	out, err := exec.CommandContext(ctx, d.kubectl, "--kubeconfig="+d.kubeconfig, "get", "leasecandidates", "-n", d.o.namespace,
		"-o", "jsonpath={.items[*].metadata.name}").Output()
	if err != nil {
		// Not served yet, or none: poll again, and say why if it times out.
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			err = fmt.Errorf("%w: %s", err, bytes.TrimSpace(exit.Stderr))
		}
		d.lastErr = fmt.Errorf("kubectl get leasecandidates: %w", err)
		return nil, nil
	}
	return strings.Fields(string(out)), nil
}

// env is what kubectl needs to run the plugin against the local server
// (kubectl takes no flags before a plugin's name).
func (d *demo) env() []string {
	if d.kubeconfig == "" {
		return []string{d.pathEnv} // a cluster's: $KUBECONFIG as it is
	}
	return []string{d.pathEnv, "KUBECONFIG=" + d.kubeconfig}
}

// pause gives a person watching time to read between steps.
func (d *demo) pause() error {
	if d.o.stepPause <= 0 {
		return nil
	}
	select {
	case <-d.ctx.Done():
		return d.ctx.Err()
	case <-time.After(d.o.stepPause):
		return nil
	}
}

// status prints `kubectl cle status`.
func (d *demo) status() {
	cmd := exec.CommandContext(d.ctx, d.kubectl, append([]string{"cle", "status", "-n", d.o.namespace}, d.pluginArgs...)...)
	cmd.Env = append(os.Environ(), d.env()...)
	out, err := cmd.CombinedOutput()
	fmt.Printf("\n$ kubectl cle status -n %s\n%s", d.o.namespace, out)
	if err != nil {
		fmt.Printf("(kubectl cle status: %v)\n", err)
	}
	fmt.Println()
}

func (d *demo) poll(what string, cond func(context.Context) (bool, error)) error {
	d.lastErr = nil
	if err := wait.PollUntilContextTimeout(d.ctx, 50*time.Millisecond, stepTimeout, true, cond); err != nil {
		if d.lastErr != nil {
			return fmt.Errorf("waiting for %s: %w (last: %v)", what, err, d.lastErr)
		}
		return fmt.Errorf("waiting for %s: %w", what, err)
	}
	return nil
}

func say(format string, args ...any) {
	fmt.Printf("%s  >>> %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}
