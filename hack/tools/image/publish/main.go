// Command publish sends a release that make release wrote where users fetch
// it from, and stands in for those places in a rehearsal.
//
//	publish push --release=DIR [--registry=HOST[:PORT]] [--plain-http]
//
// pushes the release's image (its OCI archive: every platform, as one
// index) to the repository its bundles pin, under their tag, and fails
// unless the registry then serves that tag at the digest the bundles pin: a
// bundle applied after the push runs exactly the image the release tested.
// --registry changes the registry's host only, as a rehearsal does; the
// repository's path stays the bundles'. Credentials come from the Docker
// configuration (~/.docker/config.json, as docker login or a hosted CI's
// login step writes it), anonymous without one.
//
//	publish assets --release=DIR --out=DIR --url=URL
//
// lays the release's files out as the assets of a release page (GitHub's),
// downloaded from URL: one flat directory with the bundles, the chart, the
// image's and the plugin's archives, the krew manifest as cle.yaml naming
// each archive's URL under URL, and checksums.txt. The pipeline uploads
// them with the hosting service's client (gh release upload).
//
//	publish serve --registry=ADDR --assets=ADDR --assets-dir=DIR [--assets-prefix=/PATH/]
//
// runs stand-ins of the hosting services until SIGTERM or SIGINT: an OCI
// registry (go-containerregistry's, in memory, plain HTTP) on one address,
// and a file server of DIR under the prefix (such as GitHub's release
// download path) on the other. It prints one line "serving ..." once
// both listen.
//
// The chart is pushed with helm push. The node test (test/e2e) rehearses
// the publication against these stand-ins and installs from them.
package main

import (
	"archive/tar"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: publish push|assets|serve [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "push":
		err = pushCommand(os.Args[2:])
	case "assets":
		err = assetsCommand(os.Args[2:])
	case "serve":
		err = serveCommand(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: want push, assets or serve", os.Args[1])
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "publish: %v\n", err)
		os.Exit(1)
	}
}

func pushCommand(args []string) error {
	fs := flag.NewFlagSet("push", flag.ContinueOnError)
	release := fs.String("release", "", "The release directory make release wrote.")
	registryHost := fs.String("registry", "", "The registry to push to instead of the one the bundles name (host[:port]).")
	plainHTTP := fs.Bool("plain-http", false, "Talk to the registry over plain HTTP (a local stand-in).")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *release == "" {
		return errors.New("--release is required")
	}
	ref, err := push(context.Background(), *release, *registryHost, *plainHTTP)
	if err != nil {
		return err
	}
	fmt.Printf("pushed %s\n", ref)
	return nil
}

// pinnedImage finds the image a bundle pins: repository, tag and digest.
var pinnedImage = regexp.MustCompile(`image: ([^\s:@]+(?::\d+)?/[^\s:@]+):([^\s@]+)@(sha256:[0-9a-f]{64})`)

// push pushes the image of the release in dir and returns the reference,
// repository:tag@digest, the registry then serves.
func push(ctx context.Context, dir, registryHost string, plainHTTP bool) (string, error) {
	bundle, err := os.ReadFile(filepath.Join(dir, "cle-portable.yaml"))
	if err != nil {
		return "", fmt.Errorf("the release's portable bundle: %w", err)
	}
	m := pinnedImage.FindStringSubmatch(string(bundle))
	if m == nil {
		return "", fmt.Errorf("%s pins no image by digest", filepath.Join(dir, "cle-portable.yaml"))
	}
	repo, tag, digest := m[1], m[2], m[3]
	if registryHost != "" {
		_, path, ok := strings.Cut(repo, "/")
		if !ok {
			return "", fmt.Errorf("the bundles' image %s names no registry", repo)
		}
		repo = registryHost + "/" + path
	}
	var opts []name.Option
	if plainHTTP {
		opts = append(opts, name.Insecure)
	}
	dst, err := name.NewTag(repo+":"+tag, opts...)
	if err != nil {
		return "", err
	}

	work, err := os.MkdirTemp("", "publish-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	archive := filepath.Join(dir, "cle-"+tag+"-image.oci.tar")
	if err := untar(archive, work); err != nil {
		return "", fmt.Errorf("the release's image archive: %w", err)
	}
	l, err := layout.FromPath(work)
	if err != nil {
		return "", fmt.Errorf("the OCI layout in %s: %w", archive, err)
	}
	top, err := l.ImageIndex()
	if err != nil {
		return "", err
	}
	manifest, err := top.IndexManifest()
	if err != nil {
		return "", err
	}
	if len(manifest.Manifests) != 1 {
		return "", fmt.Errorf("%s holds %d images, want the release's one", archive, len(manifest.Manifests))
	}
	desc := manifest.Manifests[0]
	if desc.Digest.String() != digest {
		return "", fmt.Errorf("%s holds %s, but the bundles pin %s", archive, desc.Digest, digest)
	}
	remoteOpts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}
	switch {
	case desc.MediaType.IsIndex():
		idx, err := top.ImageIndex(desc.Digest)
		if err != nil {
			return "", err
		}
		err = remote.WriteIndex(dst, idx, remoteOpts...)
		if err != nil {
			return "", fmt.Errorf("push %s: %w", dst, err)
		}
	case desc.MediaType.IsImage():
		img, err := top.Image(desc.Digest)
		if err != nil {
			return "", err
		}
		if err := remote.Write(dst, img, remoteOpts...); err != nil {
			return "", fmt.Errorf("push %s: %w", dst, err)
		}
	default:
		return "", fmt.Errorf("%s holds a %s, neither an image nor an index", archive, desc.MediaType)
	}

	// What a user's bundle will pull: the tag now names the pinned digest.
	served, err := remote.Head(dst, remoteOpts...)
	if err != nil {
		return "", fmt.Errorf("read back %s: %w", dst, err)
	}
	if served.Digest != desc.Digest {
		return "", fmt.Errorf("the registry serves %s at %s after the push, want %s", dst, served.Digest, desc.Digest)
	}
	return dst.String() + "@" + served.Digest.String(), nil
}

// untar extracts the regular files and directories of the tar file into dir.
func untar(archive, dir string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if !filepath.IsLocal(h.Name) {
			return fmt.Errorf("entry %q leaves the archive's directory", h.Name)
		}
		path := filepath.Join(dir, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			out, err := os.Create(path)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("entry %q is neither a file nor a directory", h.Name)
		}
	}
}

func serveCommand(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	registryAddr := fs.String("registry", "127.0.0.1:0", "Where the registry listens.")
	assetsAddr := fs.String("assets", "127.0.0.1:0", "Where the file server of the release's assets listens.")
	assetsDir := fs.String("assets-dir", "", "The directory the file server serves.")
	prefix := fs.String("assets-prefix", "/", "The URL path the directory is served under (e.g. /OWNER/REPO/releases/download/TAG/).")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *assetsDir == "" {
		return errors.New("--assets-dir is required")
	}
	if !strings.HasPrefix(*prefix, "/") || !strings.HasSuffix(*prefix, "/") {
		return fmt.Errorf("--assets-prefix %q: want a path that starts and ends with /", *prefix)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	servers, err := serve(*registryAddr, *assetsAddr, *assetsDir, *prefix)
	if err != nil {
		return err
	}
	fmt.Printf("serving registry on %s, %s under %s on %s\n", servers.registry, *assetsDir, *prefix, servers.assets)
	<-ctx.Done()
	return servers.close()
}

// standIns are the running stand-ins and the addresses they listen on.
type standIns struct {
	registry, assets string
	servers          []*http.Server
}

// serve starts the registry and the file server.
func serve(registryAddr, assetsAddr, dir, prefix string) (*standIns, error) {
	s := &standIns{}
	files := http.NewServeMux()
	files.Handle(prefix, http.StripPrefix(prefix, http.FileServer(http.Dir(dir))))
	for _, l := range []struct {
		addr    string
		handler http.Handler
		out     *string
	}{
		{registryAddr, registry.New(registry.Logger(log.New(os.Stderr, "registry: ", log.LstdFlags))), &s.registry},
		{assetsAddr, files, &s.assets},
	} {
		ln, err := net.Listen("tcp", l.addr)
		if err != nil {
			_ = s.close()
			return nil, err
		}
		*l.out = ln.Addr().String()
		srv := &http.Server{Handler: l.handler, ReadHeaderTimeout: 30 * time.Second}
		s.servers = append(s.servers, srv)
		go func() { _ = srv.Serve(ln) }()
	}
	return s, nil
}

func (s *standIns) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var errs []error
	for _, srv := range s.servers {
		errs = append(errs, srv.Shutdown(ctx))
	}
	return errors.Join(errs...)
}
