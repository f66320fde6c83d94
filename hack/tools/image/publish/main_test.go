package main

import (
	"archive/tar"
	"context"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// fakeRelease writes a release directory as make release lays it out, with
// a two-platform image index in its OCI archive and a portable bundle that
// pins pinned (the index's own digest when empty), and returns it with the
// index's digest.
func fakeRelease(t *testing.T, pinned string) (string, v1.Hash) {
	t.Helper()
	var adds []mutate.IndexAddendum
	for _, arch := range []string{"amd64", "arm64"} {
		img, err := random.Image(256, 2)
		if err != nil {
			t.Fatal(err)
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}}})
	}
	idx := mutate.AppendManifests(empty.Index, adds...)
	digest, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	p, err := layout.Write(work, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendIndex(idx); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := tarTree(work, filepath.Join(dir, "cle-v9.9.9-image.oci.tar")); err != nil {
		t.Fatal(err)
	}
	if pinned == "" {
		pinned = digest.String()
	}
	bundle := "spec:\n  containers:\n    - name: cle-controller\n      image: ghcr.io/cle-dev/cle:v9.9.9@" + pinned + "\n"
	if err := os.WriteFile(filepath.Join(dir, "cle-portable.yaml"), []byte(bundle), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, digest
}

func TestPushToStandIn(t *testing.T) {
	dir, digest := fakeRelease(t, "")
	s, err := serve("127.0.0.1:0", "127.0.0.1:0", dir, "/cle-dev/cle/releases/download/v9.9.9/")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.close() })

	ref, err := push(context.Background(), dir, s.registry, true)
	if err != nil {
		t.Fatal(err)
	}
	if want := s.registry + "/cle-dev/cle:v9.9.9@" + digest.String(); ref != want {
		t.Errorf("push returned %s, want %s", ref, want)
	}
	// Pulled as a node pulls the bundle's reference: the index by digest,
	// and each platform's image in it.
	pulled, err := name.NewDigest(s.registry+"/cle-dev/cle@"+digest.String(), name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(pulled)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 2 {
		t.Fatalf("the pushed index has %d images, want 2", len(m.Manifests))
	}
	for _, d := range m.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		layers, err := img.Layers()
		if err != nil || len(layers) != 2 {
			t.Fatalf("image %s for %s: %d layers, %v; want 2", d.Digest, d.Platform, len(layers), err)
		}
		rc, err := layers[1].Compressed()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, rc); err != nil {
			t.Fatalf("read layer of %s: %v", d.Platform, err)
		}
		rc.Close()
	}

	// The file server serves the release's files under the prefix only.
	for path, want := range map[string]int{
		"/cle-dev/cle/releases/download/v9.9.9/cle-portable.yaml": http.StatusOK,
		"/cle-portable.yaml": http.StatusNotFound,
	} {
		resp, err := http.Get("http://" + s.assets + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
		if want == http.StatusOK && !strings.Contains(string(body), digest.String()) {
			t.Errorf("GET %s: %q, want the bundle", path, body)
		}
	}
}

func TestPushRefusesAnotherDigest(t *testing.T) {
	other := "sha256:" + strings.Repeat("0", 64)
	dir, digest := fakeRelease(t, other)
	s, err := serve("127.0.0.1:0", "127.0.0.1:0", dir, "/")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.close() })
	_, err = push(context.Background(), dir, s.registry, true)
	if err == nil || !strings.Contains(err.Error(), "pin "+other) {
		t.Fatalf("push of an archive holding %s under bundles pinning %s: %v, want an error naming the pin", digest, other, err)
	}
	tag, err := name.NewTag(s.registry+"/cle-dev/cle:v9.9.9", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := remote.Head(tag); err == nil {
		t.Errorf("the registry serves %s after a refused push", tag)
	}
}

// tarTree writes the files under dir into a tar file at path, as make
// release writes the OCI archive.
func tarTree(dir, path string) error {
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(out)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		h, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if err := tw.WriteHeader(h); err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if cerr := tw.Close(); err == nil {
		err = cerr
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}
