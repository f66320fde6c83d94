package e2e

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"time"
)

// writePauseImage writes a docker-archive tarball (what docker save writes,
// which ctr images import reads) of a one-layer image that runs binary as
// /pause, tagged pauseImage.
func writePauseImage(path, binary string) error {
	return writeImage(path, binary, "pause", pauseImage)
}

// writeImage writes a docker-archive tarball of a one-layer image that runs
// binary as /name, tagged ref.
func writeImage(path, binary, name, ref string) error {
	bin, err := os.ReadFile(binary)
	if err != nil {
		return fmt.Errorf("%s image: %w", name, err)
	}
	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	if err := lw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(bin)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := lw.Write(bin); err != nil {
		return err
	}
	if err := lw.Close(); err != nil {
		return err
	}
	layerSum := sha256.Sum256(layer.Bytes())
	layerHex := hex.EncodeToString(layerSum[:])
	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"created":      "1970-01-01T00:00:00Z",
		"config":       map[string]any{"Entrypoint": []string{"/" + name}},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + layerHex}},
	})
	if err != nil {
		return err
	}
	configSum := sha256.Sum256(config)
	configName := hex.EncodeToString(configSum[:]) + ".json"
	layerName := layerHex + "/layer.tar"
	manifest, err := json.Marshal([]map[string]any{{
		"Config": configName, "RepoTags": []string{ref}, "Layers": []string{layerName},
	}})
	if err != nil {
		return err
	}

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := tar.NewWriter(f)
	for _, file := range []struct {
		name string
		data []byte
	}{{layerName, layer.Bytes()}, {configName, config}, {"manifest.json", manifest}} {
		if err := w.WriteHeader(&tar.Header{Name: file.name, Mode: 0o644, Size: int64(len(file.data)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := w.Write(file.data); err != nil {
			return err
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	return f.Close()
}
