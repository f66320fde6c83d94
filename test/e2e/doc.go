// Package e2e installs a cle release on a real node and tests it there.
//
// The node is this machine, inside namespaces the test creates: TestMain
// runs the test binary again as PID 1 of new PID, mount and network
// namespaces (util-linux's unshare). In them it mounts tmpfs over the host
// paths a kubelet and containerd write regardless of their flags (/var/lib,
// /var/log, /run), gives the loopback interface the node's address, and
// starts a whole single-node cluster: etcd and kube-apiserver (the
// CoordinatedLeaderElection gate on, the built-in election controller idled),
// kube-controller-manager, kube-scheduler, containerd with runc and the CNI
// bridge and host-local plugins, a kubelet and kube-proxy in iptables mode.
// The release is first published, as its pipeline publishes it, to
// stand-ins of the hosting services on the node's address (the publish
// tool's serve: an OCI registry for ghcr.io, a file server for the release
// downloads), and containerd pulls ghcr.io's images from the stand-in, so
// every Pod pulls the image by the digest the bundles pin.
//
// The tests then install the release as a user would, with the README's
// commands where it has them (kubectl apply -f of its bundles from the
// downloads, helm install of its chart from the registry, kubectl krew
// install of kubectl cle from its published manifest) and check what only a node shows: Pod
// Security admission, probes, the ServiceAccount token and in-cluster
// configuration, a rolling upgrade of real candidate Pods, cle-controller as
// a static Pod electing real kube-scheduler candidates, and kubectl cle run
// and completed through kubectl.
//
// When the tests end everything is stopped in order, and the namespaces die
// with the inner process. The outer TestMain then removes the empty cgroups
// containerd made (cgroups are not namespaced here), and fails the run if any
// process of the node's namespaces, mount, network namespace, link or
// iptables rule is left on the host that was not there before. Other
// programs of the host may come and go meanwhile: .ci/run runs the
// integration tests beside it.
//
// It needs root, util-linux, iproute2, iptables, conntrack, runc and the
// CNI plugins (hack/e2e.sh installs them from Debian), the binaries of
// hack/kube-bin.sh, hack/containerd.sh, hack/helm.sh and hack/krew.sh, the
// publish tool (hack/tools/image/publish), and a release in
// _output/release (make release). Run it with make e2e.
package e2e
