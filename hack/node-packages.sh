#!/usr/bin/env bash
# Installs with apt-get what the node test (hack/e2e.sh) needs from the
# distribution and does not find: runc, the CNI plugins, iptables,
# conntrack, iproute2 and util-linux. It needs root when anything is
# missing; with nothing missing it does nothing. CNI_PLUGIN_DIR names a
# directory of CNI plugins to use instead of the distribution's.
set -o errexit -o nounset -o pipefail

# Tools from the distribution, by the command each package provides.
declare -A packages=(
  [runc]=runc [iptables]=iptables [conntrack]=conntrack [ip]=iproute2 [unshare]=util-linux
)
missing=()
for cmd in "${!packages[@]}"; do
  command -v "${cmd}" >/dev/null || missing+=("${packages[${cmd}]}")
done
if [[ -z "${CNI_PLUGIN_DIR:-}" ]]; then
  found=
  for d in /usr/lib/cni /opt/cni/bin; do
    [[ -x "${d}/bridge" && -x "${d}/host-local" ]] && found=${d} && break
  done
  [[ -n "${found}" ]] || missing+=(containernetworking-plugins)
fi
[[ ${#missing[@]} -gt 0 ]] || exit 0
if ! command -v apt-get >/dev/null; then
  echo "node-packages: install these packages (or their equivalents) first: ${missing[*]}" >&2
  exit 2
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "node-packages: installing ${missing[*]} needs root" >&2
  exit 2
fi
echo "node-packages: installing ${missing[*]}" >&2
# Another apt-get (a background hack/prepare.sh) may hold dpkg's lock: wait for it.
wait_lock=(-o DPkg::Lock::Timeout=600)
apt-get "${wait_lock[@]}" update -qq
DEBIAN_FRONTEND=noninteractive apt-get "${wait_lock[@]}" install -y -qq --no-install-recommends $(printf '%s\n' "${missing[@]}" | sort -u) >/dev/null
