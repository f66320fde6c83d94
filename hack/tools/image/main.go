// Command image builds cle's container image without a container runtime: a
// single layer, from scratch, holding the static binaries cle-controller (the
// entrypoint), kubectl-cle and candidate (examples/candidate, which
// manifests/examples runs) and a passwd entry for the non-root user they run
// as. It writes
// a tarball that `docker load`, `kind load image-archive` and
// `ctr images import` accept, and an OCI image layout that `crane push`
// (or `skopeo copy oci:...`) sends to a registry. hack/image.sh calls it.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The user the image runs as: distroless's "nonroot".
const (
	uid = 65532
	gid = 65532
)

// binaries are the image's files under /, in the order they are written.
var binaries = []string{"cle-controller", "kubectl-cle", "candidate"}

// options are the builder's flags.
type options struct {
	binDir, tarPath, layoutDir, ref string
	version, revision, source       string
	created                         time.Time
	arch                            string
	// platforms are the architectures of a multi-platform image, each with
	// the directory of its binaries; empty: one image of arch from binDir.
	platforms []platform
	// archivePath is an OCI archive: the layout as one tar file, which
	// `ctr images import` and `skopeo copy oci-archive:` take.
	archivePath string
	// sbomPath receives the image's SBOM, which is also written into the
	// image as /sbom.spdx.json.
	sbomPath string
	// licensePath is cle's license, put in the image as /LICENSE.
	licensePath string
}

type platform struct{ arch, binDir string }

// platformsFlag parses repeated --platform linux/ARCH=DIR.
type platformsFlag struct{ p *[]platform }

func (f platformsFlag) String() string { return "" }
func (f platformsFlag) Set(v string) error {
	spec, dir, ok := strings.Cut(v, "=")
	arch, found := strings.CutPrefix(spec, "linux/")
	if !ok || !found || arch == "" || dir == "" {
		return fmt.Errorf("want linux/ARCH=DIR, got %q", v)
	}
	*f.p = append(*f.p, platform{arch: arch, binDir: dir})
	return nil
}

func main() {
	var o options
	var created string
	flag.StringVar(&o.binDir, "bin-dir", "", "Directory holding the static linux binaries cle-controller, kubectl-cle and candidate.")
	flag.Var(platformsFlag{&o.platforms}, "platform", "linux/ARCH=DIR: build a multi-platform image, this platform's binaries in DIR (repeatable; replaces --bin-dir and --arch).")
	flag.StringVar(&o.tarPath, "tarball", "", "Write a docker-load tarball here (empty: none); with several --platform, one per platform, {arch} in the path naming it.")
	flag.StringVar(&o.layoutDir, "layout", "", "Write an OCI image layout here (empty: none).")
	flag.StringVar(&o.archivePath, "oci-archive", "", "Write the OCI layout as one tar file here too (needs --layout).")
	flag.StringVar(&o.sbomPath, "sbom", "", "Write an SPDX SBOM of the binaries and their Go modules here, and put it in the image as /sbom.spdx.json.")
	flag.StringVar(&o.licensePath, "license", "", "cle's license file, put in the image as /LICENSE (required).")
	flag.StringVar(&o.ref, "tag", "ghcr.io/cle-dev/cle:dev", "Image reference recorded in the tarball.")
	flag.StringVar(&o.version, "version", "dev", "Version recorded in the image's labels (the binaries carry their own).")
	flag.StringVar(&o.revision, "revision", "", "Source revision recorded in the image's labels.")
	flag.StringVar(&o.source, "source", "https://github.com/cle-dev/cle", "Source repository recorded in the image's labels.")
	flag.StringVar(&created, "created", "", "Creation time (RFC 3339) recorded in the image; empty: the Unix epoch, so that equal inputs give an equal digest.")
	flag.StringVar(&o.arch, "arch", "amd64", "Architecture of the binaries (GOARCH).")
	flag.Parse()
	if created != "" {
		t, err := time.Parse(time.RFC3339, created)
		if err != nil {
			fail(fmt.Errorf("--created: %w", err))
		}
		o.created = t
	}
	if len(o.platforms) == 0 {
		if o.binDir == "" {
			fail(errors.New("--bin-dir or --platform is required"))
		}
		o.platforms = []platform{{arch: o.arch, binDir: o.binDir}}
	}
	if o.licensePath == "" {
		fail(errors.New("--license is required: an image ships its license"))
	}
	if o.tarPath == "" && o.layoutDir == "" {
		fail(errors.New("one of --tarball or --layout is required"))
	}
	if o.archivePath != "" && o.layoutDir == "" {
		fail(errors.New("--oci-archive needs --layout"))
	}
	if len(o.platforms) > 1 && o.tarPath != "" && !strings.Contains(o.tarPath, "{arch}") {
		fail(errors.New("--tarball needs {arch} in its path with several --platform"))
	}
	digest, err := run(o)
	if err != nil {
		fail(err)
	}
	fmt.Printf("image %s %s\n", o.ref, digest)
}

// run builds the image (an index of one image per platform when there are
// several) and writes every output asked for; it returns the digest a
// manifest pins: the index's or the single image's.
func run(o options) (v1.Hash, error) {
	license, err := os.ReadFile(o.licensePath)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("read the license: %w", err)
	}
	var sbomData []byte
	if o.sbomPath != "" {
		if sbomData, err = sbom(o.platforms[0].binDir, o.version, o.revision, o.source, o.created); err != nil {
			return v1.Hash{}, err
		}
		if err := writeFile(o.sbomPath, sbomData); err != nil {
			return v1.Hash{}, err
		}
	}
	var images []v1.Image
	for _, p := range o.platforms {
		po := o
		po.binDir, po.arch = p.binDir, p.arch
		img, err := build(po, license, sbomData)
		if err != nil {
			return v1.Hash{}, fmt.Errorf("linux/%s: %w", p.arch, err)
		}
		images = append(images, img)
		if o.tarPath != "" {
			if err := writeTarball(img, o.ref, strings.ReplaceAll(o.tarPath, "{arch}", p.arch)); err != nil {
				return v1.Hash{}, err
			}
		}
	}
	var pinned v1.Hash
	if len(images) == 1 {
		d, err := images[0].Digest()
		if err != nil {
			return v1.Hash{}, err
		}
		pinned = d
		if o.layoutDir != "" {
			if err := writeLayout(o.layoutDir, func(p layout.Path, opt layout.Option) error { return p.AppendImage(images[0], opt) }, o.ref); err != nil {
				return v1.Hash{}, err
			}
		}
	} else {
		idx, err := index(images, o)
		if err != nil {
			return v1.Hash{}, err
		}
		if pinned, err = idx.Digest(); err != nil {
			return v1.Hash{}, err
		}
		if o.layoutDir != "" {
			if err := writeLayout(o.layoutDir, func(p layout.Path, opt layout.Option) error { return p.AppendIndex(idx, opt) }, o.ref); err != nil {
				return v1.Hash{}, err
			}
		}
	}
	if o.archivePath != "" {
		if err := tarDir(o.layoutDir, o.archivePath); err != nil {
			return v1.Hash{}, fmt.Errorf("write the OCI archive: %w", err)
		}
	}
	return pinned, nil
}

// index is the multi-platform image: one manifest per platform.
func index(images []v1.Image, o options) (v1.ImageIndex, error) {
	var adds []mutate.IndexAddendum
	for i, img := range images {
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			Platform: &v1.Platform{OS: "linux", Architecture: o.platforms[i].arch},
		}})
	}
	idx := mutate.IndexMediaType(mutate.AppendManifests(empty.Index, adds...), types.OCIImageIndex)
	return mutate.Annotations(idx, map[string]string{
		"org.opencontainers.image.version":  o.version,
		"org.opencontainers.image.revision": o.revision,
		"org.opencontainers.image.source":   o.source,
	}).(v1.ImageIndex), nil
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "image: %v\n", err)
	os.Exit(1)
}

// build assembles the image.
func build(o options, license, sbomData []byte) (v1.Image, error) {
	layer, err := filesLayer(o.binDir, license, sbomData)
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layer)
	if err != nil {
		return nil, fmt.Errorf("add the layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", o.arch
	cf.Created = v1.Time{Time: o.created}
	cf.Config.User = fmt.Sprintf("%d:%d", uid, gid)
	cf.Config.Entrypoint = []string{"/cle-controller"}
	cf.Config.WorkingDir = "/"
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":       "cle",
		"org.opencontainers.image.description": "cle-controller (the entrypoint), kubectl-cle and the example candidate: coordinated leader election for Kubernetes",
		"org.opencontainers.image.source":      o.source,
		"org.opencontainers.image.version":     o.version,
		"org.opencontainers.image.revision":    o.revision,
	}
	if !o.created.IsZero() {
		cf.Config.Labels["org.opencontainers.image.created"] = o.created.UTC().Format(time.RFC3339)
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("set the image config: %w", err)
	}
	return mutate.ConfigMediaType(img, types.OCIConfigJSON), nil
}

// filesLayer is the image's only layer: /etc/passwd and /etc/group naming the
// non-root user, /tmp, the binaries, owned by root and executable by all,
// /LICENSE and, when given, /sbom.spdx.json.
func filesLayer(binDir string, license, sbomData []byte) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	add := func(hdr *tar.Header, content []byte) error {
		hdr.ModTime, hdr.Format = epoch, tar.FormatPAX
		if hdr.Typeflag == tar.TypeReg {
			hdr.Size = int64(len(content))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err := tw.Write(content)
		return err
	}
	dirs := []*tar.Header{
		{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777},
	}
	for _, d := range dirs {
		if err := add(d, nil); err != nil {
			return nil, err
		}
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", uid, gid)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", gid)
	if err := add(&tar.Header{Name: "etc/passwd", Typeflag: tar.TypeReg, Mode: 0o644}, []byte(passwd)); err != nil {
		return nil, err
	}
	if err := add(&tar.Header{Name: "etc/group", Typeflag: tar.TypeReg, Mode: 0o644}, []byte(group)); err != nil {
		return nil, err
	}
	for _, b := range binaries {
		content, err := os.ReadFile(filepath.Join(binDir, b))
		if err != nil {
			return nil, fmt.Errorf("read binary: %w", err)
		}
		if err := add(&tar.Header{Name: b, Typeflag: tar.TypeReg, Mode: 0o755}, content); err != nil {
			return nil, fmt.Errorf("add %s: %w", b, err)
		}
	}
	if err := add(&tar.Header{Name: "LICENSE", Typeflag: tar.TypeReg, Mode: 0o644}, license); err != nil {
		return nil, err
	}
	if sbomData != nil {
		if err := add(&tar.Header{Name: "sbom.spdx.json", Typeflag: tar.TypeReg, Mode: 0o644}, sbomData); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// writeTarball saves img as a docker-load tarball tagged ref.
func writeTarball(img v1.Image, ref, path string) error {
	r, err := name.ParseReference(ref)
	if err != nil {
		return fmt.Errorf("--tag: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := tarball.WriteToFile(path, r, img); err != nil {
		return fmt.Errorf("write the tarball: %w", err)
	}
	return nil
}

// writeLayout writes a fresh OCI layout at dir holding what add appends,
// named ref.
func writeLayout(dir string, add func(layout.Path, layout.Option) error, ref string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("write the OCI layout: %w", err)
	}
	if err := add(p, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": ref})); err != nil {
		return fmt.Errorf("write the OCI layout: %w", err)
	}
	return nil
}

// tarDir writes the files under dir into a tar file at path, in name order
// with fixed times, so that equal layouts give equal archives.
func tarDir(dir, path string) error {
	var names []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			names = append(names, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	slices.Sort(names)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	for _, p := range names {
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), ModTime: time.Unix(0, 0), Format: tar.FormatPAX, Mode: 0o644}
		if st.IsDir() {
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, hdr.Name+"/", 0o755
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			continue
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, st.Size()
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		_, err = io.Copy(tw, src)
		src.Close()
		if err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}
