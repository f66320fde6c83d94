package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// cosignBuildEnv names where hack/e2e.sh's build of cosign (hack/cosign.sh,
// started beside the tests) leaves its status: the binary's path in
// NAME.path, the build's log in NAME.log, its exit status in NAME.rc.
const cosignBuildEnv = "CLE_COSIGN_BUILD"

// sourceRepository is the repository a release is built from, as its
// provenance names it.
const sourceRepository = "https://github.com/cle-dev/cle"

// TestSignedRelease signs the image published to the stand-in registry (at
// the digest the bundles pin) and attests its SBOM and its build provenance,
// as the release workflow does, and then verifies the three as a user
// verifies a release (docs/install.md), each read back for the image's
// digest, and a signature checked against another key refused. It runs
// last, so that cosign's build, which hack/e2e.sh starts beside the tests
// when the cache lacks it, has the other tests' time.
//
// On GitHub the workflow signs keyless, with the runner's OIDC identity
// recorded in the public transparency log, and actions/attest-build-provenance
// writes and signs the provenance; neither service is reachable offline.
// Here a key pair made for the run signs, nothing is sent to a transparency
// log, and the provenance is a statement of the same form (SLSA v1) for this
// build: what is rehearsed is the signatures and attestations stored beside
// the image in the registry, and found and checked there.
func TestSignedRelease(t *testing.T) {
	n := cluster
	ctx := context.Background()
	cosign, err := cosignBuilt(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, repository, _ := strings.Cut(n.release.repo, "/")
	if err := n.signRelease(ctx, cosign, registryAddr+"/"+repository+"@"+n.release.digest); err != nil {
		t.Fatal(err)
	}
}

// cosignBuilt waits for hack/e2e.sh's build of cosign and returns the
// binary's path.
func cosignBuilt(ctx context.Context) (string, error) {
	build := os.Getenv(cosignBuildEnv)
	if build == "" {
		return "", fmt.Errorf("%s must name cosign's build: run the node test with make e2e", cosignBuildEnv)
	}
	begin := time.Now()
	var rc []byte
	err := wait.PollUntilContextTimeout(ctx, time.Second, 20*time.Minute, true, func(context.Context) (bool, error) {
		var err error
		rc, err = os.ReadFile(build + ".rc")
		return err == nil && len(bytes.TrimSpace(rc)) > 0, nil
	})
	if err != nil {
		return "", fmt.Errorf("cosign's build (hack/cosign.sh) did not end: %w", err)
	}
	if string(bytes.TrimSpace(rc)) != "0" {
		log, _ := os.ReadFile(build + ".log")
		return "", fmt.Errorf("cosign's build (hack/cosign.sh) failed:\n%s", log)
	}
	path, err := os.ReadFile(build + ".path")
	if err != nil {
		return "", err
	}
	if waited := time.Since(begin); waited > time.Second {
		fmt.Printf("e2e: waited %s for cosign's build\n", waited.Round(time.Second))
	}
	return string(bytes.TrimSpace(path)), nil
}

// signRelease signs, attests and verifies the image at ref with cosign (see
// TestSignedRelease).
func (n *node) signRelease(ctx context.Context, cosign, ref string) error {
	dir := filepath.Join(n.dir, "cosign")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	run := func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, cosign, args...)
		cmd.Dir = dir
		// cosign keeps its state under the home directory; the key pair
		// has no password.
		cmd.Env = append(os.Environ(), "HOME="+dir, "COSIGN_PASSWORD=")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("cosign %s: %w\n%s%s", strings.Join(args, " "), err, stdout.Bytes(), stderr.Bytes())
		}
		return stdout.Bytes(), nil
	}
	for _, key := range []string{"cosign", "other"} {
		if _, err := run("generate-key-pair", "--output-key-prefix="+key); err != nil {
			return err
		}
	}

	sbom := filepath.Join(n.release.dir, "cle-"+n.release.tag+".spdx.json")
	revision, err := n.release.revision()
	if err != nil {
		return err
	}
	provenance := filepath.Join(dir, "provenance.json")
	if err := writeJSON(provenance, n.release.provenance(revision)); err != nil {
		return err
	}
	sign := []string{"--key=cosign.key", "--tlog-upload=false", "--allow-http-registry", "--yes"}
	if _, err := run(append([]string{"sign"}, append(sign, ref)...)...); err != nil {
		return err
	}
	if _, err := run(append([]string{"attest", "--type=spdxjson", "--predicate=" + sbom}, append(sign, ref)...)...); err != nil {
		return err
	}
	if _, err := run(append([]string{"attest", "--type=slsaprovenance1", "--predicate=" + provenance}, append(sign, ref)...)...); err != nil {
		return err
	}

	// As a user verifies.
	verify := []string{"--key=cosign.pub", "--insecure-ignore-tlog", "--allow-http-registry", ref}
	out, err := run(append([]string{"verify"}, verify...)...)
	if err != nil {
		return err
	}
	var signatures []struct {
		Critical struct {
			Image struct {
				Digest string `json:"docker-manifest-digest"`
			} `json:"image"`
		} `json:"critical"`
	}
	if err := json.Unmarshal(out, &signatures); err != nil {
		return fmt.Errorf("cosign verify printed %q: %w", out, err)
	}
	if len(signatures) != 1 || signatures[0].Critical.Image.Digest != n.release.digest {
		return fmt.Errorf("cosign verify found signatures %+v, want one of %s", signatures, n.release.digest)
	}
	if _, err := run("verify", "--key=other.pub", "--insecure-ignore-tlog", "--allow-http-registry", ref); err == nil {
		return fmt.Errorf("cosign verify accepted %s's signature checked against a key that did not sign it", ref)
	}

	wantSBOM, err := readJSON(sbom)
	if err != nil {
		return err
	}
	for _, want := range []struct {
		kind, predicateType string
		check               func(predicate map[string]any) error
	}{
		{"spdxjson", "https://spdx.dev/Document", func(p map[string]any) error {
			if p["documentNamespace"] != wantSBOM["documentNamespace"] || p["name"] != wantSBOM["name"] {
				return fmt.Errorf("the SBOM attested is %v (%v), the release's is %v (%v)", p["name"], p["documentNamespace"], wantSBOM["name"], wantSBOM["documentNamespace"])
			}
			return nil
		}},
		{"slsaprovenance1", "https://slsa.dev/provenance/v1", func(p map[string]any) error {
			if got := provenanceCommit(p); got != revision {
				return fmt.Errorf("the provenance attested names commit %q, the release was built from %q", got, revision)
			}
			return nil
		}},
	} {
		out, err := run(append([]string{"verify-attestation", "--type=" + want.kind}, verify...)...)
		if err != nil {
			return err
		}
		statement, err := attestedStatement(out)
		if err != nil {
			return fmt.Errorf("cosign verify-attestation --type=%s: %w", want.kind, err)
		}
		if statement.PredicateType != want.predicateType {
			return fmt.Errorf("cosign verify-attestation --type=%s: predicate type %q, want %q", want.kind, statement.PredicateType, want.predicateType)
		}
		if len(statement.Subject) != 1 || "sha256:"+statement.Subject[0].Digest["sha256"] != n.release.digest {
			return fmt.Errorf("cosign verify-attestation --type=%s: subjects %+v, want the image %s", want.kind, statement.Subject, n.release.digest)
		}
		if err := want.check(statement.Predicate); err != nil {
			return err
		}
	}
	fmt.Printf("e2e: image %s signed, its SBOM and provenance attested, and all three verified with cosign\n", ref)
	return nil
}

// statement is an in-toto statement, as an attestation carries it.
type statement struct {
	PredicateType string `json:"predicateType"`
	Subject       []struct {
		Name   string            `json:"name"`
		Digest map[string]string `json:"digest"`
	} `json:"subject"`
	Predicate map[string]any `json:"predicate"`
}

// attestedStatement reads the one in-toto statement that cosign
// verify-attestation printed (a DSSE envelope a line).
func attestedStatement(out []byte) (*statement, error) {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 1 {
		return nil, fmt.Errorf("%d attestations verified, want one:\n%s", len(lines), out)
	}
	var envelope struct {
		PayloadType string `json:"payloadType"`
		Payload     string `json:"payload"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &envelope); err != nil {
		return nil, fmt.Errorf("reading the envelope %q: %w", lines[0], err)
	}
	if envelope.PayloadType != "application/vnd.in-toto+json" {
		return nil, fmt.Errorf("payload type %q, want an in-toto statement", envelope.PayloadType)
	}
	payload, err := base64.StdEncoding.DecodeString(envelope.Payload)
	if err != nil {
		return nil, fmt.Errorf("decoding the payload: %w", err)
	}
	var s statement
	if err := json.Unmarshal(payload, &s); err != nil {
		return nil, fmt.Errorf("reading the statement %q: %w", payload, err)
	}
	return &s, nil
}

// bundleHeader is the first line of a release's bundle: its version and the
// commit it was built from.
var bundleHeader = regexp.MustCompile(`^# cle (\S+) \(([0-9a-f]{40}(?:-dirty)?)\): `)

// revision reads the commit the release was built from in its portable
// bundle's first line.
func (r *release) revision() (string, error) {
	data, err := os.ReadFile(r.bundle("cle-portable.yaml"))
	if err != nil {
		return "", err
	}
	m := bundleHeader.FindSubmatch(data)
	if m == nil || string(m[1]) != r.tag {
		return "", fmt.Errorf("%s does not start with the header of a %s bundle", r.bundle("cle-portable.yaml"), r.tag)
	}
	return string(m[2]), nil
}

// provenance is the SLSA v1 provenance predicate of the release's image as
// the release workflow's build of tag at revision records it.
func (r *release) provenance(revision string) map[string]any {
	ref := "refs/tags/" + r.tag
	return map[string]any{
		"buildDefinition": map[string]any{
			"buildType": "https://actions.github.io/buildtypes/workflow/v1",
			"externalParameters": map[string]any{
				"workflow": map[string]any{"ref": ref, "repository": sourceRepository, "path": ".github/workflows/release.yml"},
			},
			"resolvedDependencies": []any{
				map[string]any{"uri": "git+" + sourceRepository + "@" + ref, "digest": map[string]any{"gitCommit": revision}},
			},
		},
		"runDetails": map[string]any{
			"builder": map[string]any{"id": sourceRepository + "/.github/workflows/release.yml@" + ref},
		},
	}
}

// provenanceCommit is the commit a provenance predicate's first resolved
// dependency names.
func provenanceCommit(p map[string]any) string {
	def, _ := p["buildDefinition"].(map[string]any)
	deps, _ := def["resolvedDependencies"].([]any)
	if len(deps) == 0 {
		return ""
	}
	dep, _ := deps[0].(map[string]any)
	digest, _ := dep["digest"].(map[string]any)
	commit, _ := digest["gitCommit"].(string)
	return commit
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}

func readJSON(path string) (map[string]any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var v map[string]any
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}
