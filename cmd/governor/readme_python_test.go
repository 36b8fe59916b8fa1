package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/mockllm"
)

// pythonExample is README's Python example: the python block after its
// python-example marker.
var pythonExample = regexp.MustCompile("(?s)<!-- python-example:[^>]*-->\\s*```python\\n(.*?)```")

// README's Python example runs as written against a Governor and prints
// each item's answer in input order.
func TestREADMEPythonExample(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	m := pythonExample.FindSubmatch(readme)
	require.NotNil(t, m, "README.md has a python block after a python-example marker")
	if err := exec.Command("python3", "-c", "import requests").Run(); err != nil {
		if os.Getenv("GOVERNOR_CI") == "1" {
			t.Fatalf("python3 with requests is missing, and GOVERNOR_CI=1 requires it (.ci/run installs it): %v", err)
		}
		t.Skipf("python3 with requests is missing: %v", err)
	}
	_, mockURL := startMock(t, mockllm.Config{})
	g := startGovernor(t, "GOVERNOR_UPSTREAM="+mockURL)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "python3", "-")
	cmd.Stdin = bytes.NewReader(m[1])
	cmd.Env = append(os.Environ(), "GOVERNOR_URL=http://"+g.base, "OPENAI_API_KEY=sk-test")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Equal(t, "q0 200 Simulated answer to: Say 0\nq1 200 Simulated answer to: Say 1\nq2 200 Simulated answer to: Say 2\n", string(out))
}
