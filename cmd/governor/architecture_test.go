package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// docs/ARCHITECTURE.md names every package of the module in its table,
// and every file it points a reader at by path exists: a package added,
// or a file moved or renamed, fails here until the map follows.
func TestArchitectureMapsTheCode(t *testing.T) {
	const root = "../.."
	doc, err := os.ReadFile(filepath.Join(root, "docs", "ARCHITECTURE.md"))
	require.NoError(t, err)
	text := string(doc)

	packages := map[string]bool{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch d.Name() {
			case "testdata", "node_modules", ".git", "deploy":
				return filepath.SkipDir // deploy is a module of its own
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			packages[filepath.ToSlash(filepath.Dir(rel))] = true
		}
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, packages)
	for pkg := range packages {
		if pkg == "." {
			continue
		}
		assert.Contains(t, text, "`"+pkg+"`", "ARCHITECTURE.md names package %s", pkg)
	}

	paths := regexp.MustCompile("`((?:[a-z0-9_]+/)+[a-z0-9_.]+\\.(?:go|md|sh|mjs))`").FindAllStringSubmatch(text, -1)
	require.NotEmpty(t, paths)
	for _, m := range paths {
		_, err := os.Stat(filepath.Join(root, filepath.FromSlash(m[1])))
		assert.NoError(t, err, "ARCHITECTURE.md points at %s", m[1])
	}
}
