package k8s

import (
	"fmt"
	"os"
	"path"
)

// Files that Write creates in its directory.
const (
	// ManifestFile holds YAML's stream.
	ManifestFile = "airlock.yaml"
	// SeccompDir holds the seccomp profile at SeccompPath below it, laid
	// out as below the kubelet's seccomp root, so that copying the folder
	// there installs it.
	SeccompDir = "seccomp"
)

// Write writes the export into dir (created if missing): ManifestFile,
// and the seccomp profile at SeccompDir/SeccompPath, the file the Pod's
// localhostProfile names relative to the kubelet's seccomp root.
func (m *Manifests) Write(dir string) error {
	y, err := m.YAML()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("k8s: write: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("k8s: write: %w", err)
	}
	defer root.Close()
	prof := path.Join(SeccompDir, m.SeccompPath)
	if err := root.MkdirAll(path.Dir(prof), 0o755); err != nil {
		return fmt.Errorf("k8s: write: %w", err)
	}
	if err := root.WriteFile(prof, append(m.Seccomp, '\n'), 0o644); err != nil {
		return fmt.Errorf("k8s: write: %w", err)
	}
	if err := root.WriteFile(ManifestFile, y, 0o644); err != nil {
		return fmt.Errorf("k8s: write: %w", err)
	}
	return nil
}
