package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// etcKubernetes holds the static Pod's kubeconfig (manifests/static-pod).
const etcKubernetes = "/etc/kubernetes"

// nodeCommands are the programs the node runs, its containers' included.
var nodeCommands = map[string]bool{
	"etcd": true, "kube-apiserver": true, "kube-controller-manager": true, "kube-scheduler": true,
	"kube-proxy": true, "kubelet": true, "containerd": true, "containerd-shim-runc-v2": true,
	"runc": true, "pause": true, "cle-controller": true, "candidate": true, "e2e.test": true,
}

// hostPaths are written by a kubelet, containerd or the CNI plugins whatever
// their flags say; the node covers their parents with tmpfs.
var hostPaths = []string{
	"/var/lib/kubelet", "/var/log/containers", "/var/log/pods", "/var/lib/cni", "/var/lib/containerd",
	"/run/containerd", "/run/netns", "/var/run/netns", "/run/nri", "/var/run/nri", "/opt/containerd",
}

// hostState is what a node could leave behind on the host.
type hostState struct {
	processes map[string]string // "pid starttime" -> description
	mounts    map[string]bool   // mount points
	links     map[string]bool
	netns     map[string]bool
	iptables  map[string]bool // rules and chains, counters zeroed
	paths     map[string]bool // hostPaths that exist
	cgroups   map[string]bool // cgroup directories
}

func snapshotHost() (*hostState, error) {
	s := &hostState{
		processes: map[string]string{}, mounts: map[string]bool{}, links: map[string]bool{},
		netns: map[string]bool{}, iptables: map[string]bool{}, paths: map[string]bool{}, cgroups: map[string]bool{},
	}
	selfNS, _ := os.Readlink("/proc/self/ns/pid")
	selfNet, _ := os.Readlink("/proc/self/ns/net")
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, stat := range stats {
		data, err := os.ReadFile(stat)
		if err != nil {
			continue
		}
		end := strings.LastIndexByte(string(data), ')')
		start := strings.IndexByte(string(data), '(')
		if end < 0 || start < 0 || start > end {
			continue
		}
		fields := strings.Fields(string(data[end+1:]))
		if len(fields) < 20 {
			continue
		}
		dir := filepath.Dir(stat)
		pid := filepath.Base(dir)
		comm := string(data[start+1 : end])
		ns, _ := os.Readlink(filepath.Join(dir, "ns", "pid"))
		exe, _ := os.Readlink(filepath.Join(dir, "exe"))
		// fields[19] is the start time: a pid reused later is another process.
		desc := fmt.Sprintf("pid %s %s (%s)", pid, comm, exe)
		if ns != "" && ns != selfNS {
			desc += " in another PID namespace " + ns
		}
		if net, _ := os.Readlink(filepath.Join(dir, "ns", "net")); net != "" && net != selfNet {
			desc += " in another network namespace " + net
		}
		s.processes[pid+" "+fields[19]] = desc
	}
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	for _, line := range strings.Split(string(mountinfo), "\n") {
		if f := strings.Fields(line); len(f) > 4 {
			s.mounts[f[4]] = true
		}
	}
	out, err := exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		return nil, fmt.Errorf("ip link: %w", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			s.links[strings.TrimSuffix(f[1], ":")] = true
		}
	}
	for _, dir := range []string{"/run/netns", "/var/run/netns"} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			s.netns[filepath.Join(dir, e.Name())] = true
		}
	}
	counters := regexp.MustCompile(`\[\d+:\d+\]`)
	for _, save := range []string{"iptables-save", "ip6tables-save"} {
		if _, err := exec.LookPath(save); err != nil {
			continue
		}
		out, err := exec.Command(save).Output()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", save, err)
		}
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			line := sc.Text()
			if line == "" || strings.HasPrefix(line, "#") || line == "COMMIT" {
				continue
			}
			s.iptables[save+": "+counters.ReplaceAllString(line, "[0:0]")] = true
		}
	}
	for _, p := range hostPaths {
		if _, err := os.Lstat(p); err == nil {
			s.paths[p] = true
		}
	}
	for dir := range containerdCgroups() {
		s.cgroups[dir] = true
	}
	return s, nil
}

// containerdCgroups lists the cgroup directories of every hierarchy that
// containerd's CRI namespace, k8s.io, holds: its containers' cgroups.
func containerdCgroups() map[string]bool {
	dirs := map[string]bool{}
	roots, _ := filepath.Glob("/sys/fs/cgroup/*")
	seen := map[string]bool{}
	for _, root := range roots {
		real, err := filepath.EvalSymlinks(root)
		if err != nil || seen[real] {
			continue
		}
		seen[real] = true
		_ = filepath.WalkDir(real, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if d.IsDir() && strings.Contains(path, "/k8s.io") {
				dirs[path] = true
			}
			return nil
		})
	}
	return dirs
}

// removeNewCgroups removes the cgroup directories that appeared since
// before, deepest first: containerd makes one per container under k8s.io in
// every hierarchy and leaves them, empty, when its containers are gone.
func removeNewCgroups(before *hostState) (int, error) {
	var created []string
	for dir := range containerdCgroups() {
		if !before.cgroups[dir] {
			created = append(created, dir)
		}
	}
	sort.Slice(created, func(i, j int) bool { return len(created[i]) > len(created[j]) })
	var errs []string
	for _, dir := range created {
		if err := os.Remove(dir); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return len(created) - len(errs), fmt.Errorf("cgroups left (a process still in them?): %s", strings.Join(errs, "; "))
	}
	return len(created), nil
}

// leaks lists what after has of the node's that before did not.
func (before *hostState) leaks(after *hostState) []string {
	var out []string
	for key, desc := range after.processes {
		if _, ok := before.processes[key]; ok {
			continue
		}
		// The node's processes live in its PID and network namespaces. A
		// process of this test's namespaces is the host's own, even with a
		// node's program: .ci/run runs the integration tests, each with its
		// kube-apiserver and etcd, beside this test.
		comm := strings.Fields(desc)[2]
		if strings.Contains(desc, "in another PID namespace") ||
			nodeCommands[comm] && strings.Contains(desc, "in another network namespace") {
			out = append(out, "process "+desc)
		}
	}
	for _, set := range []struct {
		what          string
		before, after map[string]bool
	}{
		{"mount ", before.mounts, after.mounts},
		{"link ", before.links, after.links},
		{"network namespace ", before.netns, after.netns},
		{"", before.iptables, after.iptables},
		{"path ", before.paths, after.paths},
		{"cgroup ", before.cgroups, after.cgroups},
	} {
		for item := range set.after {
			if !set.before[item] {
				out = append(out, set.what+item)
			}
		}
	}
	sort.Strings(out)
	return out
}
