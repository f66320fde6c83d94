package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// krewManifest is the krew manifest's path in a release directory, and
// krewAsset its name among the release's assets.
const (
	krewManifest = "plugins/cle.yaml"
	krewAsset    = "cle.yaml"
)

func assetsCommand(args []string) error {
	fs := flag.NewFlagSet("assets", flag.ContinueOnError)
	release := fs.String("release", "", "The release directory make release wrote.")
	out := fs.String("out", "", "The directory to lay the assets out in (created; must not exist).")
	url := fs.String("url", "", "The URL the assets are downloaded from, e.g. https://github.com/OWNER/REPO/releases/download/TAG.")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *release == "" || *out == "" || *url == "" {
		return errors.New("--release, --out and --url are required")
	}
	names, err := layOutAssets(*release, *out, strings.TrimSuffix(*url, "/"))
	if err != nil {
		return err
	}
	fmt.Printf("%d assets in %s, for %s/\n", len(names), *out, *url)
	return nil
}

// krewURI is a platform's archive in the krew manifest.
var krewURI = regexp.MustCompile(`(?m)^(\s*uri:\s*)(\S+/)?(kubectl-cle_[^/\s]+\.tar\.gz)\s*$`)

// layOutAssets writes the release's assets into out as a release page
// holds them, one flat directory: every file at the top of the release
// directory (the bundles, the chart, the image's archive, the plugin's
// archives), the krew manifest as cle.yaml with each archive's URL under
// url, and checksums.txt with the sha256 of each. The manifest's checksums
// must be its archives'. It returns the assets' names.
func layOutAssets(release, out, url string) ([]string, error) {
	entries, err := os.ReadDir(release)
	if err != nil {
		return nil, err
	}
	if err := os.Mkdir(out, 0o755); err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if !e.Type().IsRegular() || e.Name() == "checksums.txt" {
			continue
		}
		if err := copyFile(filepath.Join(release, e.Name()), filepath.Join(out, e.Name())); err != nil {
			return nil, err
		}
		names = append(names, e.Name())
	}

	manifest, err := os.ReadFile(filepath.Join(release, krewManifest))
	if err != nil {
		return nil, fmt.Errorf("the release's krew manifest: %w", err)
	}
	var archives []string
	rendered := krewURI.ReplaceAllStringFunc(string(manifest), func(line string) string {
		m := krewURI.FindStringSubmatch(line)
		archives = append(archives, m[3])
		return m[1] + url + "/" + m[3]
	})
	if len(archives) == 0 {
		return nil, fmt.Errorf("%s names no archive of kubectl-cle", krewManifest)
	}
	for _, a := range archives {
		sum, err := sha256File(filepath.Join(out, a))
		if err != nil {
			return nil, fmt.Errorf("the archive %s of the krew manifest: %w", a, err)
		}
		if !strings.Contains(rendered, sum) {
			return nil, fmt.Errorf("the krew manifest has not the sha256 of %s (%s)", a, sum)
		}
	}
	if err := os.WriteFile(filepath.Join(out, krewAsset), []byte(rendered), 0o644); err != nil {
		return nil, err
	}
	names = append(names, krewAsset)

	slices.Sort(names)
	var sums strings.Builder
	for _, name := range names {
		sum, err := sha256File(filepath.Join(out, name))
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&sums, "%s  %s\n", sum, name)
	}
	if err := os.WriteFile(filepath.Join(out, "checksums.txt"), []byte(sums.String()), 0o644); err != nil {
		return nil, err
	}
	return append(names, "checksums.txt"), nil
}

func sha256File(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// copyFile links src to dst, or copies it where a link cannot be made.
func copyFile(src, dst string) error {
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}
