package e2e

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"

	"github.com/cle-dev/cle/test/integration/framework"
)

// release is a release directory written by make release.
type release struct {
	dir        string
	ociArchive string
	plugin     string // kubectl-cle's archive for this platform
	repo       string // the image's repository, as the bundles name it
	tag        string
	digest     string
}

// releaseDirEnv names the release to test; by default _output/release.
const releaseDirEnv = "CLE_RELEASE_DIR"

var pinnedImage = regexp.MustCompile(`image: ([^\s:@]+(?::\d+)?/[^\s:@]+):([^\s@]+)@(sha256:[0-9a-f]{64})`)

// openRelease finds the release's files, checks them against its
// checksums.txt, and reads the image the bundles pin.
func openRelease() (*release, error) {
	dir := os.Getenv(releaseDirEnv)
	if dir == "" {
		dir = framework.RepoPath("_output/release")
	}
	r := &release{dir: dir}
	if err := r.verifyChecksums(); err != nil {
		return nil, fmt.Errorf("release in %s (make release VERSION=vX.Y.Z writes one): %w", dir, err)
	}
	portable, err := os.ReadFile(r.bundle("cle-portable.yaml"))
	if err != nil {
		return nil, err
	}
	m := pinnedImage.FindStringSubmatch(string(portable))
	if m == nil {
		return nil, fmt.Errorf("%s names no image pinned by digest", r.bundle("cle-portable.yaml"))
	}
	r.repo, r.tag, r.digest = m[1], m[2], m[3]
	r.ociArchive = filepath.Join(dir, "cle-"+r.tag+"-image.oci.tar")
	r.plugin = filepath.Join(dir, fmt.Sprintf("kubectl-cle_%s_linux_%s.tar.gz", r.tag, runtime.GOARCH))
	for _, f := range []string{r.ociArchive, r.plugin} {
		if _, err := os.Stat(f); err != nil {
			return nil, fmt.Errorf("release: %w", err)
		}
	}
	return r, nil
}

func (r *release) bundle(name string) string { return filepath.Join(r.dir, name) }

// tagRef is the image's name by tag: Pods name it as tagRef()@digest.
func (r *release) tagRef() string { return r.repo + ":" + r.tag }

// verifyChecksums checks every file checksums.txt lists, as a user
// downloading the release would.
func (r *release) verifyChecksums() error {
	f, err := os.Open(filepath.Join(r.dir, "checksums.txt"))
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 2 {
			return fmt.Errorf("checksums.txt: bad line %q", sc.Text())
		}
		want, name := fields[0], strings.TrimPrefix(fields[1], "*")
		file, err := os.Open(filepath.Join(r.dir, name))
		if err != nil {
			return err
		}
		h := sha256.New()
		_, err = io.Copy(h, file)
		file.Close()
		if err != nil {
			return err
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != want {
			return fmt.Errorf("checksums.txt: %s has sha256 %s, want %s", name, got, want)
		}
		n++
	}
	if n == 0 {
		return fmt.Errorf("checksums.txt lists nothing")
	}
	return sc.Err()
}

// extractPlugin unpacks kubectl-cle from its release archive into dir,
// and checks that the archive carries cle's license beside it.
func (r *release) extractPlugin(dir string) error {
	f, err := os.Open(r.plugin)
	if err != nil {
		return err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("%s: %w", r.plugin, err)
	}
	tr := tar.NewReader(gz)
	var plugin, license bool
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("%s: %w", r.plugin, err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		switch h.Name {
		case "LICENSE":
			text, err := io.ReadAll(tr)
			if err != nil {
				return fmt.Errorf("%s: %w", r.plugin, err)
			}
			license = strings.Contains(string(text), "Apache License")
		case "kubectl-cle":
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			out, err := os.OpenFile(filepath.Join(dir, "kubectl-cle"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
			if err != nil {
				return err
			}
			if _, err := io.Copy(out, tr); err != nil {
				out.Close()
				return err
			}
			if err := out.Close(); err != nil {
				return err
			}
			plugin = true
		}
	}
	switch {
	case !plugin:
		return fmt.Errorf("%s holds no kubectl-cle", r.plugin)
	case !license:
		return fmt.Errorf("%s holds no LICENSE with cle's license", r.plugin)
	}
	return nil
}
