package main

import (
	"archive/tar"
	"debug/elf"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestImage builds the image from freshly built static binaries, as
// hack/image.sh does, reads both outputs back and checks what a cluster
// relies on: it runs as non-root, its entrypoint is cle-controller, it holds
// its static binaries, and the controller it holds reports the version
// stamped into it.
func TestImage(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	const version = "v9.8.7-test"
	cmd := exec.Command("go", "build", "-trimpath", "-gcflags=all=-dwarf=false", // cle_goflags, hack/lib/build-info.sh
		"-ldflags", "-s -w -X github.com/cle-dev/cle/internal/version.version="+version,
		"-o", bin+"/", "./cmd/cle-controller", "./cmd/kubectl-cle", "./examples/candidate")
	cmd.Dir = filepath.Join("..", "..", "..")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the binaries: %v\n%s", err, out)
	}
	o := options{
		binDir: bin, tarPath: filepath.Join(dir, "cle.tar"), layoutDir: filepath.Join(dir, "oci"),
		ref: "example.com/cle:" + version, version: version, revision: "abc123", source: "https://example.com/cle",
		arch: runtime.GOARCH, licensePath: filepath.Join("..", "..", "..", "LICENSE"),
	}
	o.platforms = []platform{{arch: o.arch, binDir: o.binDir}}
	want, err := run(o)
	if err != nil {
		t.Fatal(err)
	}

	fromTar, err := tarball.ImageFromPath(o.tarPath, nil)
	if err != nil {
		t.Fatalf("read the tarball back: %v", err)
	}
	idx, err := layout.ImageIndexFromPath(o.layoutDir)
	if err != nil {
		t.Fatalf("read the OCI layout back: %v", err)
	}
	fromLayout, err := idx.Image(want)
	if err != nil {
		t.Fatalf("the OCI layout has no image %s: %v", want, err)
	}
	for name, got := range map[string]v1.Image{"tarball": fromTar, "layout": fromLayout} {
		t.Run(name, func(t *testing.T) { checkImage(t, got, dir, version) })
	}
}

func checkImage(t *testing.T, img v1.Image, dir, version string) {
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532 (non-root)", cf.Config.User)
	}
	if got := strings.Join(cf.Config.Entrypoint, " "); got != "/cle-controller" {
		t.Errorf("entrypoint %q, want /cle-controller", got)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s, want linux/%s", cf.OS, cf.Architecture, runtime.GOARCH)
	}
	for k, v := range map[string]string{
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.revision": "abc123",
		"org.opencontainers.image.source":   "https://example.com/cle",
	} {
		if cf.Config.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, cf.Config.Labels[k], v)
		}
	}

	files := extract(t, img, t.TempDir())
	if !strings.Contains(files["etc/passwd"].content, "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd does not name user 65532: %q", files["etc/passwd"].content)
	}
	for _, b := range binaries {
		f, ok := files[b]
		if !ok {
			t.Errorf("/%s is missing", b)
			continue
		}
		if f.mode&0o111 != 0o111 {
			t.Errorf("/%s has mode %o, want it executable by everyone", b, f.mode)
		}
		if dynamic, err := isDynamic(f.path); err != nil || dynamic {
			t.Errorf("/%s: dynamically linked %v (%v), want a static binary for a base without libc", b, dynamic, err)
		}
	}
	// The test runs on linux: the image's controller runs here.
	out, err := exec.Command(files["cle-controller"].path, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), version) {
		t.Errorf("/cle-controller --version: %q, %v; want it to print %s", out, err, version)
	}
}

type file struct {
	path, content string
	mode          int64
}

// extract unpacks the image's filesystem into dir; small files' contents are
// kept for the checks.
func extract(t *testing.T, img v1.Image, dir string) map[string]file {
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	files := map[string]file{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		name := strings.TrimPrefix(hdr.Name, "/")
		path := filepath.Join(dir, filepath.Base(name))
		content, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, content, os.FileMode(hdr.Mode)&0o777); err != nil {
			t.Fatal(err)
		}
		f := file{path: path, mode: hdr.Mode}
		if len(content) < 4096 {
			f.content = string(content)
		}
		files[name] = f
	}
}

// isDynamic reports whether an ELF binary asks for a dynamic loader.
func isDynamic(path string) (bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			return true, nil
		}
	}
	return false, nil
}

// TestMultiPlatform builds the release's form: an index of one image per
// platform in an OCI layout and archive, a docker-load tarball per
// platform, and the SBOM, in the image and beside it. The binaries of the
// native platform stand in for both (the builder does not look inside).
func TestMultiPlatform(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	cmd := exec.Command("go", "build", "-trimpath", "-gcflags=all=-dwarf=false", "-o", bin+"/", "./cmd/cle-controller", "./cmd/kubectl-cle", "./examples/candidate")
	cmd.Dir = filepath.Join("..", "..", "..")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the binaries: %v\n%s", err, out)
	}
	o := options{
		platforms: []platform{{"amd64", bin}, {"arm64", bin}},
		tarPath:   filepath.Join(dir, "cle-linux-{arch}.tar"), layoutDir: filepath.Join(dir, "oci"),
		archivePath: filepath.Join(dir, "cle.oci.tar"), sbomPath: filepath.Join(dir, "sbom.spdx.json"),
		ref: "example.com/cle:v1.2.3", version: "v1.2.3", revision: "abc123", source: "https://example.com/cle",
		licensePath: filepath.Join("..", "..", "..", "LICENSE"),
	}
	pinned, err := run(o)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := layout.ImageIndexFromPath(o.layoutDir)
	if err != nil {
		t.Fatal(err)
	}
	top, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(top.Manifests) != 1 || top.Manifests[0].Digest != pinned || top.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != o.ref {
		t.Fatalf("layout index %+v, want one index %s named %s", top.Manifests, pinned, o.ref)
	}
	multi, err := idx.ImageIndex(pinned)
	if err != nil {
		t.Fatal(err)
	}
	im, err := multi.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var archs []string
	for _, m := range im.Manifests {
		archs = append(archs, m.Platform.OS+"/"+m.Platform.Architecture)
		img, err := multi.Image(m.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Architecture != m.Platform.Architecture || cf.Config.Labels["org.opencontainers.image.version"] != "v1.2.3" {
			t.Errorf("%s: config architecture %s, version label %q", m.Digest, cf.Architecture, cf.Config.Labels["org.opencontainers.image.version"])
		}
		files := extract(t, img, t.TempDir())
		if files["sbom.spdx.json"].path == "" {
			t.Errorf("linux/%s: no /sbom.spdx.json", m.Platform.Architecture)
		}
		if got, err := os.ReadFile(files["LICENSE"].path); err != nil || !strings.Contains(string(got), "Apache License") {
			t.Errorf("linux/%s: /LICENSE is not cle's license (%v)", m.Platform.Architecture, err)
		}
		tarImg, err := tarball.ImageFromPath(strings.ReplaceAll(o.tarPath, "{arch}", m.Platform.Architecture), nil)
		if err != nil {
			t.Fatal(err)
		}
		// A docker-load tarball has a manifest of its own format: the
		// same image is the same config.
		got, _ := tarImg.ConfigName()
		want, _ := img.ConfigName()
		if got != want {
			t.Errorf("linux/%s: tarball image config %s, want the index's %s", m.Platform.Architecture, got, want)
		}
	}
	if strings.Join(archs, " ") != "linux/amd64 linux/arm64" {
		t.Errorf("platforms %v, want linux/amd64 and linux/arm64", archs)
	}
	if st, err := os.Stat(o.archivePath); err != nil || st.Size() == 0 {
		t.Errorf("OCI archive: %v", err)
	}

	var doc spdxDocument
	data, err := os.ReadFile(o.sbomPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	purls := map[string]bool{}
	licenses := map[string]string{} // purl -> licenseDeclared
	for _, p := range doc.Packages {
		for _, r := range p.ExternalRefs {
			purls[r.ReferenceLocator] = true
			licenses[r.ReferenceLocator] = p.LicenseDeclared
		}
		if p.LicenseDeclared == "" || p.LicenseDeclared == "NOASSERTION" {
			t.Errorf("SBOM package %s@%s: licenseDeclared %q, want the identifiers of its license", p.Name, p.VersionInfo, p.LicenseDeclared)
		}
	}
	for prefix, want := range map[string]string{
		"pkg:golang/github.com/cle-dev/cle/cmd/cle-controller@": "Apache-2.0",
		"pkg:golang/k8s.io/client-go@":                          "Apache-2.0",
		"pkg:golang/stdlib@":                                    "BSD-3-Clause",
	} {
		for p, got := range licenses {
			if strings.HasPrefix(p, prefix) && got != want {
				t.Errorf("SBOM: %s licenseDeclared %q, want %q", p, got, want)
			}
		}
	}
	for _, want := range []string{"pkg:golang/github.com/cle-dev/cle/cmd/cle-controller@v1.2.3", "pkg:golang/k8s.io/client-go@"} {
		found := false
		for p := range purls {
			found = found || strings.HasPrefix(p, want)
		}
		if !found {
			t.Errorf("SBOM has no package %s…", want)
		}
	}
}

func TestClassifyLicense(t *testing.T) {
	apache := "Apache License Version 2.0, January 2004"
	mit := "Permission is hereby granted, free of charge, to any person obtaining a copy"
	bsd2 := "Redistribution and use in source and binary forms, with or without modification, are permitted"
	bsd3 := bsd2 + " ... Neither the name of Google Inc. nor the names of its contributors may be used"
	for _, tc := range []struct{ text, want string }{
		{apache, "Apache-2.0"},
		{mit, "MIT"},
		{bsd2, "BSD-2-Clause"},
		{bsd3, "BSD-3-Clause"},
		{"Permission to use, copy, modify, and/or distribute this software for any purpose", "ISC"},
		{"Mozilla Public License Version 2.0", "MPL-2.0"},
		{mit + "\n" + apache, "Apache-2.0 AND MIT"},
		{"All rights reserved.", "NOASSERTION"},
		{"", "NOASSERTION"},
	} {
		text := strings.ToLower(strings.Join(strings.Fields(tc.text), " "))
		if got := classifyLicense(text); got != tc.want {
			t.Errorf("classifyLicense(%.40q…) = %q, want %q", tc.text, got, tc.want)
		}
	}
	for name, want := range map[string]bool{"LICENSE": true, "LICENSE.MIT": true, "license.md": true, "COPYING": true, "LICENCE-APACHE": true, "README.md": false, "go.mod": false} {
		if got := licenseFile(name); got != want {
			t.Errorf("licenseFile(%q) = %v, want %v", name, got, want)
		}
	}
	if got := escapeModulePath("github.com/BurntSushi/toml"); got != "github.com/!burnt!sushi/toml" {
		t.Errorf("escapeModulePath = %q", got)
	}
}
