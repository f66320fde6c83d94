#!/usr/bin/env bash
# Keeps the Go modules that the tools modules share with the project's at one
# version each: the newest any of them needs. The build cache keys a compiled
# package by its source and its dependencies', so a package of client-go, say,
# compiled for cle's commands is reused by kubectl's build only when both
# modules select the same version of it and of everything below it. Aligned,
# a cold machine compiles the packages they share once: kubectl built after
# cle's commands took 84 s of CPU instead of 323 s.
#
# It looks at the project's two modules (the core and
# contrib/controller-runtime) and the tools modules whose builds share most
# with them: the newest Kubernetes tools module, helm's, promtool's and
# cosign's. Each
# module one of them selects at an older version than another is required at
# the newer one (go mod edit, then go mod tidy, which raises further what that
# needs), until they agree. A tool raises the project's own modules only when
# it needs a newer version of a module they share, and it says so: a change to
# review like any dependency update. hack/kube-tools-add.sh runs it for a new
# Kubernetes tools module, and make verify checks that nothing is behind.
#
#   hack/align-tools.sh          raise what is behind, then go mod tidy
#   hack/align-tools.sh --check  list what is behind and fail (make verify)
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${root}"

check=false
[[ "${1:-}" == --check ]] && check=true

# krew pins a Kubernetes client from 2021 and shares little; the small tools
# share nothing worth a constraint.
project=(. contrib/controller-runtime)
tools=("hack/tools/kube/$(hack/kube-bin.sh --list | tail -n 1)" hack/tools/helm hack/tools/prometheus hack/tools/cosign)
# Modules a tool keeps at its own version, "directory path" each, because its
# code does not build with the newer one: promtool 3.9.1 takes three results
# from client_golang's Query, which returns four from v1.25.0 on. Only the
# packages above such a module are compiled twice.
held=("hack/tools/prometheus github.com/prometheus/client_golang")

# selected DIR prints "path version" for every module that provides a package
# the module in DIR builds (its tests' included), as CGO_ENABLED=0 builds see
# it. A module replaced by another version of itself is at that version.
selected() {
	local pkgs=(./...)
	# A tools module's one package imports the commands it builds.
	if [[ -f "$1/tools.go" ]]; then
		read -r -a pkgs < <(cd "$1" && GOFLAGS=-mod=mod go list -e -tags tools -f '{{join .Imports " "}}' .)
	fi
	(cd "$1" && CGO_ENABLED=0 GOFLAGS=-mod=mod go list -deps -test \
		-f '{{with .Module}}{{if and .Replace (eq .Replace.Path .Path)}}{{.Path}} {{.Replace.Version}}{{else if not .Replace}}{{.Path}} {{.Version}}{{end}}{{end}}' "${pkgs[@]}" |
		awk 'NF == 2 && $2 != ""' | sort -u)
}

# newest prints the newest of the semantic versions on standard input: sort -V
# with a pre-release's "-" as "~", which sorts before the release.
newest() { sed 's/^\(v[0-9]*\.[0-9]*\.[0-9]*\)-/\1~/' | sort -V | tail -n 1 | sed 's/~/-/'; }

work=$(mktemp -d)
trap 'rm -rf "${work}"' EXIT
printf '%s\n' "${held[@]}" >"${work}/held"

for round in 1 2 3 4; do
	: >"${work}/all"
	for dir in "${project[@]}" "${tools[@]}"; do
		selected "${dir}" | sed "s|^|${dir} |" >>"${work}/all"
	done
	# The modules two or more of them select, each at the newest selected.
	awk '{print $2}' "${work}/all" | sort | uniq -d >"${work}/shared"
	: >"${work}/target"
	while read -r path; do
		echo "${path} $(awk -v p="${path}" '$2 == p {print $3}' "${work}/all" | newest)" >>"${work}/target"
	done <"${work}/shared"
	# What is behind: module directory, path, its version, the newest.
	awk 'FILENAME == ARGV[1] { held[$1 " " $2] = 1; next }
		FILENAME == ARGV[2] { want[$1] = $2; next }
		($2 in want) && $3 != want[$2] && !(($1 " " $2) in held) { print $1, $2, $3, want[$2] }' \
		"${work}/held" "${work}/target" "${work}/all" >"${work}/behind"
	if [[ ! -s "${work}/behind" ]]; then
		echo "align-tools: the modules share $(wc -l <"${work}/shared") modules, each at one version (but for those held: ${#held[@]})" >&2
		exit 0
	fi
	if ${check}; then
		awk '{ printf "  %s selects %s %s; another selects %s\n", $1, $2, $3, $4 }' "${work}/behind" >&2
		echo "align-tools: the modules above are behind; run hack/align-tools.sh" >&2
		exit 1
	fi
	for dir in "${project[@]}" "${tools[@]}"; do
		mapfile -t upgrades < <(awk -v d="${dir}" '$1 == d { print $2 "@" $4 }' "${work}/behind")
		[[ ${#upgrades[@]} -gt 0 ]] || continue
		if [[ " ${project[*]} " == *" ${dir} "* ]]; then
			echo "align-tools: ${dir} is raised to what a tool needs: ${upgrades[*]}" >&2
		fi
		echo "align-tools: round ${round}: ${dir}: requires ${upgrades[*]}" >&2
		# Each a minimum, which go mod tidy raises further where another
		# requirement needs more (go get would refuse the lower one).
		(cd "${dir}" && go mod edit "${upgrades[@]/#/-require=}" && GOFLAGS=-mod=mod go mod tidy)
	done
done
echo "align-tools: still not aligned after ${round} rounds:" >&2
cat "${work}/behind" >&2
exit 1
