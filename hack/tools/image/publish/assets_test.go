package main

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// krewTemplate is a krew manifest as make release renders it, with the
// sha256 of each platform's archive to fill in.
const krewTemplate = `apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: cle
spec:
  version: v9.9.9
  platforms:
    - selector:
        matchLabels: {os: linux, arch: amd64}
      uri: https://github.com/cle-dev/cle/releases/download/v9.9.9/kubectl-cle_v9.9.9_linux_amd64.tar.gz
      sha256: "%AMD64%"
      bin: kubectl-cle
    - selector:
        matchLabels: {os: darwin, arch: arm64}
      uri: https://github.com/cle-dev/cle/releases/download/v9.9.9/kubectl-cle_v9.9.9_darwin_arm64.tar.gz
      sha256: "%ARM64%"
      bin: kubectl-cle
`

// writeKrew writes two plugin archives and the manifest naming them into
// the release directory; a non-empty wrong replaces the arm64 archive's
// sha256.
func writeKrew(t *testing.T, dir, wrong string) {
	t.Helper()
	sums := map[string]string{}
	for _, p := range []string{"linux_amd64", "darwin_arm64"} {
		data := []byte("the archive for " + p)
		if err := os.WriteFile(filepath.Join(dir, "kubectl-cle_v9.9.9_"+p+".tar.gz"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		sums[p] = hex.EncodeToString(sum[:])
	}
	if wrong != "" {
		sums["darwin_arm64"] = wrong
	}
	manifest := strings.NewReplacer("%AMD64%", sums["linux_amd64"], "%ARM64%", sums["darwin_arm64"]).Replace(krewTemplate)
	if err := os.MkdirAll(filepath.Join(dir, "plugins"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, krewManifest), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLayOutAssets(t *testing.T) {
	release, _ := fakeRelease(t, "")
	writeKrew(t, release, "")
	out := filepath.Join(t.TempDir(), "assets")
	const url = "http://127.0.0.1:5080/cle-dev/cle/releases/download/v9.9.9"
	names, err := layOutAssets(release, out, url)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"cle-portable.yaml", "cle-v9.9.9-image.oci.tar", "cle.yaml", "kubectl-cle_v9.9.9_darwin_arm64.tar.gz", "kubectl-cle_v9.9.9_linux_amd64.tar.gz", "checksums.txt"}
	if !slices.Equal(names, want) {
		t.Errorf("assets %q, want %q", names, want)
	}
	entries, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(want) {
		t.Errorf("%d files in %s, want %d", len(entries), out, len(want))
	}

	manifest, err := os.ReadFile(filepath.Join(out, krewAsset))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"linux_amd64", "darwin_arm64"} {
		if line := "      uri: " + url + "/kubectl-cle_v9.9.9_" + p + ".tar.gz\n"; !strings.Contains(string(manifest), line) {
			t.Errorf("the laid out krew manifest has no line %q:\n%s", line, manifest)
		}
	}
	if strings.Contains(string(manifest), "https://github.com/") {
		t.Errorf("the laid out krew manifest still names https://github.com/:\n%s", manifest)
	}

	sums, err := os.ReadFile(filepath.Join(out, "checksums.txt"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(sums), "\n"), "\n")
	if len(lines) != len(want)-1 {
		t.Fatalf("checksums.txt has %d lines, want %d:\n%s", len(lines), len(want)-1, sums)
	}
	for _, line := range lines {
		sum, name, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("checksums.txt line %q", line)
		}
		if got, err := sha256File(filepath.Join(out, name)); err != nil || got != sum {
			t.Errorf("checksums.txt: %s %s, the file's is %s (%v)", sum, name, got, err)
		}
	}
}

func TestLayOutAssetsRefusesAWrongChecksum(t *testing.T) {
	release, _ := fakeRelease(t, "")
	writeKrew(t, release, strings.Repeat("0", 64))
	_, err := layOutAssets(release, filepath.Join(t.TempDir(), "assets"), "http://example.invalid/dl")
	if err == nil || !strings.Contains(err.Error(), "kubectl-cle_v9.9.9_darwin_arm64.tar.gz") {
		t.Fatalf("laying out a krew manifest with a wrong sha256: %v, want an error naming the archive", err)
	}
}
