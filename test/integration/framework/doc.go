// Package framework runs a real control plane for integration tests: etcd and
// kube-apiserver, built from source by hack/kube-bin.sh, on free loopback
// ports with their state in a temporary directory.
//
// One Server serves a whole test package (see Main); each test gets its own
// namespace. The server can be restarted on the same etcd data, paused and
// resumed, and run with the CoordinatedLeaderElection feature gate on (native
// mode) or off (portable mode). In native mode the election controller built
// into kube-apiserver can be idled by holding its own Lease, so that the
// controller under test is the only one electing.
//
// Every child process and temporary directory is removed when the server
// stops, and Main fails the run if any child process is left.
package framework
