#!/usr/bin/env bash
# Checks formatting, go vet of the code modules, and that every module's
# go.mod/go.sum is tidy.
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${root}"
failed=0

unformatted=$(gofmt -l $(git ls-files --cached --others --exclude-standard '*.go'))
if [[ -n "${unformatted}" ]]; then
  echo "verify: not gofmt'd:" >&2
  echo "${unformatted}" >&2
  failed=1
fi

# Vetted as make release and the tests' programs build (CGO_ENABLED=0 and
# cle_goflags of hack/lib/build-info.sh; no package of cle uses cgo): the
# packages vet compiles are then theirs, not a configuration of its own that
# a cold run pays for once more.
source hack/lib/tools.sh
vet() { CGO_ENABLED=0 go vet "${cle_goflags[@]}" ./...; }
vet || failed=1
(cd contrib/controller-runtime && vet) || failed=1
(cd hack/tools/image && vet) || failed=1
(cd hack/tools/modproxy && vet) || failed=1
(cd hack/tools/helm && vet) || failed=1
(cd hack/tools/crosscheck && vet) || failed=1

# The manifests name the image make image tags: the version in VERSION, never
# a mutable :latest.
version=$(cat VERSION)
for k in $(git ls-files 'manifests/*kustomization.yaml'); do
  if grep -q 'newName: ghcr.io/cle-dev/cle$' "${k}" && ! grep -q "newTag: ${version}\$" "${k}"; then
    echo "verify: ${k} does not name the image ghcr.io/cle-dev/cle:${version} (VERSION)" >&2
    failed=1
  fi
done
if git grep -nE '(cle-dev/cle:|newTag: )latest\b' -- manifests docs README.md hack Makefile Dockerfile; then
  echo "verify: a mutable :latest image; name a version" >&2
  failed=1
fi

# Every module a user can fetch carries the license at its root, the same text.
for mod in . contrib/controller-runtime; do
  if ! cmp -s LICENSE "${mod}/LICENSE"; then
    echo "verify: ${mod}/LICENSE is missing or differs from LICENSE (Apache-2.0)" >&2
    failed=1
  fi
done

# The controller-runtime module requires the core module at the version
# released with it, the one in VERSION: consumers ignore its replace ../..
# and fetch exactly that version, so a version never tagged breaks go get.
contrib_requires=$(cd contrib/controller-runtime && go list -m -f '{{.Version}}' github.com/cle-dev/cle)
if [[ "${contrib_requires}" != "${version}" ]]; then
  echo "verify: contrib/controller-runtime/go.mod requires github.com/cle-dev/cle ${contrib_requires}, not ${version} (VERSION); run: (cd contrib/controller-runtime && go mod edit -require=github.com/cle-dev/cle@${version})" >&2
  failed=1
fi

# The krew manifest template passes krew-index's own check (its layout, the
# name, the platforms); cmd/kubectl-cle's TestKrewManifest checks it against
# VERSION and what make release builds.
krew_bin=$(dirname "$(hack/krew.sh)")
if ! krew_log=$("${krew_bin}/validate-krew-manifest" -manifest plugins/cle.yaml -skip-install 2>&1); then
  echo "${krew_log}" >&2
  echo "verify: plugins/cle.yaml is not a valid krew manifest" >&2
  failed=1
fi

# The workflows a hosted CI runs (.github/workflows: the tests, the release)
# pass actionlint: their syntax, expressions, action inputs and runner
# labels.
if ! "$(hack/actionlint.sh)" -no-color .github/workflows/*.yml; then
  echo "verify: .github/workflows do not pass actionlint" >&2
  failed=1
fi

# The release workflow signs with the cosign that make e2e rehearses with.
cosign_version=$(go_mod_version hack/tools/cosign/go.mod github.com/sigstore/cosign/v2)
if ! grep -q "cosign-release: ${cosign_version} " .github/workflows/release.yml; then
  echo "verify: .github/workflows/release.yml must install cosign ${cosign_version}, the version in hack/tools/cosign/go.mod" >&2
  failed=1
fi

# Each knockout (hack/sim-knockouts.sh) must still take its fix out of the
# code as it is now.
for patch in hack/knockouts/*.patch; do
  if ! git apply --check "${patch}"; then
    echo "verify: ${patch} no longer applies; take the fix out again by hand and regenerate it with git diff" >&2
    failed=1
  fi
done

# The tools modules select the project's versions of the modules they share,
# so that their builds reuse the packages its builds compiled.
hack/align-tools.sh --check || failed=1

for mod in $(cle::modules); do
  if ! (cd "${mod}" && go mod tidy -diff); then
    echo "verify: ${mod}/go.mod or go.sum is not tidy; run: (cd ${mod} && go mod tidy)" >&2
    failed=1
  fi
done

exit "${failed}"
