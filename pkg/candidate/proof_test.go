package candidate

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/internal/proof"
	"github.com/cle-dev/cle/pkg/access"
)

func TestTerminationMessageMount(t *testing.T) {
	const pod = "/var/lib/kubelet/pods/6b1f7e2a-3c4d-4e5f-8a9b-0c1d2e3f4a5b"
	for _, tc := range []struct {
		name, mountinfo, path string
		want                  messageMount
		err                   error
	}{
		{
			name: "default path",
			mountinfo: "1462 1451 0:120 / / rw,relatime master:1 - overlay overlay rw\n" +
				"1470 1462 259:1 " + pod + "/etc-hosts /etc/hosts rw,relatime - ext4 /dev/nvme0n1p1 rw\n" +
				"1471 1462 259:1 " + pod + "/containers/scheduler/8f2c1a0b /dev/termination-log rw,relatime - ext4 /dev/nvme0n1p1 rw\n",
			want: messageMount{path: "/dev/termination-log", container: "scheduler"},
		},
		{
			name:      "the file at a given path",
			mountinfo: "1471 1462 259:1 " + pod + "/containers/scheduler/8f2c1a0b /dev/termination-log rw,relatime - ext4 /dev/nvme0n1p1 rw\n",
			path:      "/dev/termination-log",
			want:      messageMount{path: "/dev/termination-log", container: "scheduler"},
		},
		{
			name:      "no file of the kubelet's at the path",
			mountinfo: "1471 1462 259:1 " + pod + "/containers/scheduler/8f2c1a0b /dev/termination-log rw,relatime - ext4 /dev/nvme0n1p1 rw\n",
			path:      "/tmp/termination-log",
			err:       ErrNotInPod,
		},
		{
			// /var/lib/kubelet on a file system of its own: the root is
			// relative to it. A path of the Pod's own, with a space.
			name:      "kubelet directory mounted apart",
			mountinfo: "1471 1462 259:3 /pods/6b1f7e2a-3c4d-4e5f-8a9b-0c1d2e3f4a5b/containers/app/0a1b2c3d /var/run/exit\\040log rw - xfs /dev/sdb1 rw\n",
			want:      messageMount{path: "/var/run/exit log", container: "app"},
		},
		{
			name:      "not in a Pod",
			mountinfo: "22 1 259:1 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p1 rw\n",
			err:       ErrNotInPod,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := terminationMessageMount(strings.NewReader(tc.mountinfo), tc.path)
			if !errors.Is(err, tc.err) || got != tc.want {
				t.Fatalf("terminationMessageMount = %+v, %v; want %+v, %v", got, err, tc.want, tc.err)
			}
		})
	}
}

func TestAppendOnce(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "termination-log")
	marker := proof.Marker("0123456789abcdef0123456789abcdef")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second candidate of the process finds it written
		if err := appendOnce(path, marker); err != nil {
			t.Fatal(err)
		}
	}
	if b, _ := os.ReadFile(path); string(b) != marker {
		t.Fatalf("file = %q, want the marker once", b)
	}

	// A message already there is kept, on a line of its own.
	if err := os.WriteFile(path, []byte("starting"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := appendOnce(path, marker); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if got := proof.InstancesIn(string(b)); len(got) != 1 {
		t.Fatalf("file = %q names instances %v, want one", b, got)
	}

	// A file the kubelet would report only in part, and a missing one.
	if err := os.WriteFile(path, []byte(strings.Repeat("x", 4090)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := appendOnce(path, marker); err == nil {
		t.Error("appendOnce wrote a marker past what the kubelet reports")
	}
	if err := appendOnce(filepath.Join(dir, "missing"), marker); err == nil {
		t.Error("appendOnce created a file the kubelet did not mount")
	}
}

func TestProofOfDeathRegistersAndStamps(t *testing.T) {
	const id = "0123456789abcdef0123456789abcdef"
	path := filepath.Join(t.TempDir(), "termination-log")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	bubble(t, func(t *testing.T, h *harness) {
		c := h.start(func(cfg *Config) {
			cfg.ProofOfDeath = &ProofOfDeath{TerminationMessagePath: path, Pod: "team/app-0", Container: "app", Instance: id}
		})
		if b, _ := os.ReadFile(path); string(b) != proof.Marker(id) {
			t.Fatalf("termination message file = %q, want the marker", b)
		}
		lc := h.candidate(me)
		if lc.Annotations[access.InstanceAnnotation] != id || lc.Annotations[access.PodAnnotation] != "team/app-0" || lc.Annotations[access.ContainerAnnotation] != "app" {
			t.Fatalf("LeaseCandidate annotations = %v, want the instance, the Pod and the container", lc.Annotations)
		}
		h.elect(me)
		if !c.IsLeader() {
			t.Fatal("not leader")
		}
		if got, want := proof.HolderProcess(h.lease()), (proof.Process{Instance: id, Pod: "team/app-0", Container: "app"}); got != want {
			t.Fatalf("the renewal names process %+v, want %+v (annotations %v)", got, want, h.lease().Annotations)
		}
		h.step(DefaultRetryPeriod)
		if got := proof.HolderInstance(h.lease()); got != id {
			t.Fatalf("the next renewal names instance %q, want %q", got, id)
		}
		h.prefer("better")
		if l := h.lease(); l.Annotations[access.HolderInstanceAnnotation] != "" {
			t.Errorf("the hand-over to better kept the stamp %q", l.Annotations[access.HolderInstanceAnnotation])
		}
	})
}

func TestProofOfDeathNeedsThePod(t *testing.T) {
	for _, pod := range []string{"", "app-0", "team/", "/app-0", "team/app/0"} {
		cfg := valid()
		cfg.ProofOfDeath = &ProofOfDeath{TerminationMessagePath: "/dev/termination-log", Pod: pod, Container: "app"}
		if _, err := New(cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("Pod %q: New = %v, want ErrInvalidConfig", pod, err)
		}
	}
}

// A report of this process's exit counts only for its own container: with
// no container named and no kubelet's file at the path to name it, or a
// name no container can have, the Config is refused.
func TestProofOfDeathNeedsTheContainer(t *testing.T) {
	saved := mountinfo
	t.Cleanup(func() { mountinfo = saved })
	mountinfo = filepath.Join(t.TempDir(), "mountinfo")
	if err := os.WriteFile(mountinfo, []byte("1471 1462 259:1 /var/lib/kubelet/pods/6b1f7e2a-3c4d-4e5f-8a9b-0c1d2e3f4a5b/containers/scheduler/8f2c1a0b /dev/termination-log rw - ext4 /dev/vda1 rw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, container, want string }{
		{path: "/dev/termination-log", want: "scheduler"}, // found in the mounts
		{path: "/dev/termination-log", container: "app", want: "app"},
		{path: "/tmp/termination-log"},                        // not the kubelet's file: refused
		{path: "/dev/termination-log", container: "App"},      // not a DNS label
		{path: "/dev/termination-log", container: "app side"}, // would break the stamp
	} {
		cfg := valid()
		cfg.ProofOfDeath = &ProofOfDeath{TerminationMessagePath: tc.path, Pod: "team/app-0", Container: tc.container}
		err := cfg.completeProofOfDeath()
		if tc.want == "" {
			if err == nil {
				t.Errorf("%s, container %q: accepted as %q, want refused", tc.path, tc.container, cfg.ProofOfDeath.Container)
			}
			continue
		}
		if err != nil || cfg.ProofOfDeath.Container != tc.want {
			t.Errorf("%s, container %q: container %q, %v; want %q", tc.path, tc.container, cfg.ProofOfDeath.Container, err, tc.want)
		}
	}
}

func TestNoProofOfDeathWithoutTheFile(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		stale := map[string]string{access.InstanceAnnotation: "fedcba9876543210fedcba9876543210", access.PodAnnotation: "team/app-0", access.ContainerAnnotation: "app"}
		h.put(&coordinationv1beta1.LeaseCandidate{
			ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: me, Annotations: stale},
			Spec: coordinationv1beta1.LeaseCandidateSpec{LeaseName: testLease, BinaryVersion: "1.36.0", EmulationVersion: "1.35.0",
				Strategy: coordinationv1.OldestEmulationVersion, RenewTime: ptr.To(metav1.NewMicroTime(h.clock.Now()))},
		})
		c := h.start(func(cfg *Config) {
			cfg.ProofOfDeath = &ProofOfDeath{TerminationMessagePath: filepath.Join(t.TempDir(), "missing"), Pod: "team/app-0", Container: "app"}
		})
		// The instance of an earlier process is not this one's.
		if a := h.candidate(me).Annotations; a[access.InstanceAnnotation] != "" || a[access.PodAnnotation] != "" || a[access.ContainerAnnotation] != "" {
			t.Fatalf("LeaseCandidate annotations = %v, want no instance, Pod or container", a)
		}
		if len(h.logged(ktesting.LogError, "Cannot write the termination message file")) == 0 {
			t.Error("the unwritable file went unsaid")
		}
		h.elect(me)
		if !c.IsLeader() {
			t.Fatal("not leader")
		}
		if _, ok := h.lease().Annotations[access.HolderInstanceAnnotation]; ok {
			t.Errorf("renewal stamped without a proof of death: %v", h.lease().Annotations)
		}
	})
}
