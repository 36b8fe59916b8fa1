package deploy

import (
	"bytes"
	"io/fs"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// kustomizationNames are the file names kustomize accepts for a
// kustomization.
var kustomizationNames = []string{"kustomization.yaml", "kustomization.yml", "Kustomization"}

// kustomizations lists the directories under deploy/ (this package's
// directory) that hold a kustomization, relative to it, in lexical order.
func kustomizations(t *testing.T) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && slices.Contains(kustomizationNames, d.Name()) {
			dirs = append(dirs, filepath.ToSlash(filepath.Dir(path)))
		}
		return nil
	})
	require.NoError(t, err)
	return dirs
}

// render builds the kustomization in dir in-process, as
// `kubectl kustomize dir` does, and returns the multi-document YAML.
func render(t *testing.T, dir string) []byte {
	t.Helper()
	opts := krusty.MakeDefaultOptions()
	// As the kustomize CLI and kubectl do: the kustomization's sortOptions,
	// else the legacy order (ConfigMaps and Services before workloads).
	opts.Reorder = krusty.ReorderOptionUnspecified
	m, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), dir)
	require.NoError(t, err, "kustomize build %s", dir)
	out, err := m.AsYaml()
	require.NoError(t, err, "kustomize build %s", dir)
	return out
}

// The examples this directory promises are there, so that a walk that finds
// nothing, or a renamed example, cannot pass unnoticed.
func TestKustomizationsFound(t *testing.T) {
	dirs := kustomizations(t)
	for _, want := range []string{"base", "shared", "overlays/long-drain"} {
		assert.Contains(t, dirs, want, "kustomizations found: %v", dirs)
	}
}

func TestEveryKustomizationRenders(t *testing.T) {
	for _, dir := range kustomizations(t) {
		t.Run(dir, func(t *testing.T) {
			objs, err := decodeAll(render(t, dir))
			require.NoError(t, err, "strict decoding of the rendered %s", dir)
			assert.NotEmpty(t, objs, "%s renders no document", dir)
		})
	}
}

// kubectl's built-in kustomize renders what the in-process kustomize renders
// (compared as data: the two versions may order keys differently).
func TestKubectlKustomizeAgrees(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not on PATH")
	}
	for _, dir := range kustomizations(t) {
		t.Run(dir, func(t *testing.T) {
			var stderr bytes.Buffer
			cmd := exec.Command(kubectl, "kustomize", dir)
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			require.NoError(t, err, "kubectl kustomize %s: %s", dir, stderr.String())
			assert.Equal(t, documents(t, render(t, dir)), documents(t, out), "kubectl kustomize %s", dir)
		})
	}
}

// documents parses multi-document YAML into plain data.
func documents(t *testing.T, data []byte) []any {
	t.Helper()
	raws, err := splitDocuments(data)
	require.NoError(t, err)
	var docs []any
	for _, raw := range raws {
		var doc any
		require.NoError(t, yaml.Unmarshal(raw, &doc))
		docs = append(docs, doc)
	}
	return docs
}
