package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// plugin is a krew plugin manifest (krew.googlecontainertools.github.com/v1alpha2,
// as krew-index's plugins/*.yaml): the fields krew reads, and no others.
type plugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string     `json:"version"`
		Homepage         string     `json:"homepage"`
		ShortDescription string     `json:"shortDescription"`
		Description      string     `json:"description"`
		Caveats          string     `json:"caveats"`
		Platforms        []platform `json:"platforms"`
	} `json:"spec"`
}

type platform struct {
	Selector struct {
		MatchLabels map[string]string `json:"matchLabels"`
	} `json:"selector"`
	URI    string `json:"uri"`
	Sha256 string `json:"sha256"`
	Bin    string `json:"bin"`
	Files  []struct {
		From string `json:"from"`
		To   string `json:"to"`
	} `json:"files"`
}

// placeholder stands for each archive's sha256 in the template; make release
// replaces it.
const placeholder = "0000000000000000000000000000000000000000000000000000000000000000"

// TestKrewManifest checks the template plugins/cle.yaml, which make release
// renders into the release's krew manifest by putting the release's version
// in place of the template's and each archive's sha256 in place of the
// placeholder; it builds an archive for each platform the template lists.
// So the template must be the manifest of the version in VERSION, complete
// but for the checksums, each platform's archive named as make release names
// it and holding what the manifest installs from it.
func TestKrewManifest(t *testing.T) {
	root := filepath.Join("..", "..")
	data, err := os.ReadFile(filepath.Join(root, "plugins", "cle.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var p plugin
	if err := yaml.UnmarshalStrict(data, &p); err != nil {
		t.Fatalf("plugins/cle.yaml: %v", err)
	}
	version, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	v := strings.TrimSpace(string(version))

	if p.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || p.Kind != "Plugin" || p.Metadata.Name != "cle" {
		t.Errorf("apiVersion %q, kind %q, name %q: want a krew v1alpha2 Plugin named cle (the file's name)", p.APIVersion, p.Kind, p.Metadata.Name)
	}
	if p.Spec.Version != v {
		t.Errorf("spec.version is %q, want %q, the version in VERSION", p.Spec.Version, v)
	}
	if p.Spec.Homepage != "https://github.com/cle-dev/cle" {
		t.Errorf("spec.homepage is %q", p.Spec.Homepage)
	}
	if p.Spec.ShortDescription == "" || strings.ContainsAny(p.Spec.ShortDescription, "\r\n") || p.Spec.Description == "" {
		t.Errorf("want a one-line shortDescription and a description: %q, %q", p.Spec.ShortDescription, p.Spec.Description)
	}
	// The caveats tell where krew puts the completion helper: the store
	// directory of this version.
	if want := "/store/cle/" + v + "/kubectl_complete-cle"; !strings.Contains(p.Spec.Caveats, want) {
		t.Errorf("spec.caveats do not name %s:\n%s", want, p.Spec.Caveats)
	}

	seen := map[string]bool{}
	for i, pl := range p.Spec.Platforms {
		goos, goarch := pl.Selector.MatchLabels["os"], pl.Selector.MatchLabels["arch"]
		target := goos + "/" + goarch
		if len(pl.Selector.MatchLabels) != 2 || goos == "" || goarch == "" || seen[target] {
			t.Errorf("platforms[%d]: selector %v, want matchLabels os and arch, once each pair", i, pl.Selector.MatchLabels)
			continue
		}
		seen[target] = true
		archive := fmt.Sprintf("kubectl-cle_%s_%s_%s.tar.gz", v, goos, goarch)
		if want := "https://github.com/cle-dev/cle/releases/download/" + v + "/" + archive; pl.URI != want {
			t.Errorf("%s: uri %s, want %s", target, pl.URI, want)
		}
		if pl.Sha256 != placeholder {
			t.Errorf("%s: sha256 %q, want the placeholder make release replaces (%s)", target, pl.Sha256, placeholder)
		}
		bin, helper := "kubectl-cle", "kubectl_complete-cle"
		if goos == "windows" {
			bin, helper = "kubectl-cle.exe", "kubectl_complete-cle.cmd"
		}
		if pl.Bin != bin {
			t.Errorf("%s: bin %q, want %q", target, pl.Bin, bin)
		}
		var files []string
		for _, f := range pl.Files {
			if f.To != "." {
				t.Errorf("%s: files: %s goes to %q, want the top of the install directory", target, f.From, f.To)
			}
			files = append(files, f.From)
		}
		// What make release puts in the archive, every file of it.
		if want := []string{bin, helper, "LICENSE"}; !slices.Equal(files, want) {
			t.Errorf("%s: files %q, want %q", target, files, want)
		}
		if _, err := os.Stat(filepath.Join(root, "cmd", "kubectl-cle", helper)); err != nil {
			t.Errorf("%s: the completion helper: %v", target, err)
		}
	}
	// The node test installs the linux/amd64 archive with krew.
	for _, want := range []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64", "windows/amd64"} {
		if !seen[want] {
			t.Errorf("no platform %s", want)
		}
	}
}

// TestCompletionHelper: kubectl runs kubectl_complete-cle with the words after
// `kubectl cle` and the one being completed, empty or not; the helper hands
// them all, unchanged, to kubectl-cle __complete on PATH.
func TestCompletionHelper(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("a POSIX shell script")
	}
	helper, err := filepath.Abs("kubectl_complete-cle")
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(helper); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("%s is not executable: %v, %v", helper, err, fi)
	}
	// A stand-in kubectl-cle that prints its arguments, one a line.
	bin := t.TempDir()
	stub := "#!/bin/sh\nfor a in \"$@\"; do printf '<%s>\\n' \"$a\"; done\n"
	if err := os.WriteFile(filepath.Join(bin, "kubectl-cle"), []byte(stub), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(helper, "describe", "-n", "kube system", "")
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if want := "<__complete>\n<describe>\n<-n>\n<kube system>\n<>\n"; string(out) != want {
		t.Errorf("kubectl-cle ran with\n%s\nwant\n%s", out, want)
	}
}
