package e2e

// pauseImage is the sandbox image, imported and pinned so that the image
// garbage collector keeps it.
const pauseImage = "e2e.local/pause:1"

// candImage runs test/bench/cand, the benchmark's candidates of every kind.
const candImage = "e2e.local/cand:1"

// managerImage runs contrib/controller-runtime/test/benchmanager, the
// benchmark's controller-runtime manager.
const managerImage = "e2e.local/manager:1"

// shardedImage runs contrib/controller-runtime/examples/sharded, the sharded
// controller.
const shardedImage = "e2e.local/sharded:1"

// containerdConfig keeps all of containerd's state under the node's
// directory (ROOT) and leaves out the plugins that would write elsewhere
// (/opt/containerd, /run/nri).
const containerdConfig = `version = 3
root = 'ROOT/root'
state = 'ROOT/state'
temp = 'ROOT/tmp'
disabled_plugins = [
  'io.containerd.internal.v1.opt',
  'io.containerd.nri.v1.nri',
  'io.containerd.snapshotter.v1.blockfile',
  'io.containerd.snapshotter.v1.erofs',
  'io.containerd.tracing.processor.v1.otlp',
  'io.containerd.internal.v1.tracing',
]

[grpc]
  address = 'SOCKET'
[ttrpc]
  address = 'SOCKET.ttrpc'
[debug]
  address = ''
  level = 'info'
[metrics]
  address = ''

[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = 'PAUSE'
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = 'HOSTS'

[plugins.'io.containerd.cri.v1.runtime']
  # The test runs as root without CAP_SYS_RESOURCE: the sandbox's negative
  # oom_score_adj would fail runc's start otherwise.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_unprivileged_ports = false
  enable_unprivileged_icmp = false
  cdi_spec_dirs = []
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = 'runc'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = 'RUNC'
        Root = 'ROOT/runc'
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['CNIBIN']
    conf_dir = 'CNICONF'
    max_conf_num = 1

[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
  stream_server_address = '127.0.0.1'
  stream_server_port = '0'
`

// cniConfig is the Pods' network: a bridge with host-local addresses
// (%[1]s is its state, %[2]s the range) and port mappings.
const cniConfig = `{
  "cniVersion": "1.0.0",
  "name": "e2e",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "%[1]s",
        "ranges": [[{"subnet": "%[2]s"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`

// kubeletConfig fits a kubelet into this machine: cgroup v1 with cgroupfs
// and no per-QoS cgroups, no swap check, no eviction or image garbage
// collection (the imported images cannot be pulled again), anonymous
// access to its API from kube-apiserver only (it listens inside the node's
// network namespace), and no cluster DNS.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 0.0.0.0
port: 10250
healthzBindAddress: 127.0.0.1
healthzPort: 10248
readOnlyPort: 0
containerRuntimeEndpoint: unix://SOCKET
imageServiceEndpoint: unix://SOCKET
staticPodPath: STATIC
fileCheckFrequency: 2s
podLogsDir: PODLOGS
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failCgroupV1: false
failSwapOn: false
resolvConf: ""
clusterDomain: cluster.local
clusterDNS: []
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "0%"
  nodefs.available: "0%"
  nodefs.inodesFree: "0%"
  imagefs.available: "0%"
protectKernelDefaults: false
makeIPTablesUtilChains: false
`
