package batch_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/batch"
)

// Every path under /governor/batches/ that names no job endpoint (an
// empty id, an id no job can have, a segment too many or unknown) gets
// 404 not_found in the API's error shape, with a message that says what
// is wrong and what the paths are, whether or not the job exists, and
// touches no job. The well-formed paths keep working.
func TestMalformedBatchPaths(t *testing.T) {
	e := newEnv(t, envOptions{})
	st := e.createJob(t, mustJSON(t, map[string]any{"requests": []any{chatItem("a", "x", nil)}}))
	e.waitJob(t, st.ID)
	job := batch.PathBatches + "/" + st.ID
	const (
		noID     = "no batch job id in the path"
		notAnID  = "is not a batch job id"
		noRoute  = "no batch endpoint"
		thePaths = "a job's paths are /governor/batches/{id} (GET, DELETE), /governor/batches/{id}/results (GET) and /governor/batches/{id}/cancel (POST)"
	)
	for _, tc := range []struct {
		method, path, says string
	}{
		{"GET", batch.PathBatches + "/", noID},
		{"GET", batch.PathBatches + "//results", noID},
		{"GET", batch.PathBatches + "///results", noID},
		{"POST", batch.PathBatches + "//cancel", noID},
		{"DELETE", batch.PathBatches + "//", noID},
		{"GET", job + "/", noRoute},
		{"DELETE", job + "/", noRoute},
		{"GET", job + "//results", noRoute},
		{"GET", job + "/results/", noRoute},
		{"GET", job + "/results/x", noRoute},
		{"POST", job + "/cancel/", noRoute},
		{"GET", job + "/foo", noRoute},
		{"GET", job + "%2Fresults", notAnID},
		{"GET", batch.PathBatches + "/a%20b", notAnID},
		{"GET", batch.PathBatches + "/%2F/results", notAnID},
		{"GET", batch.PathBatches + "/" + strings.Repeat("a", 3000), notAnID},
	} {
		resp, body := e.do(t, tc.method, tc.path, "", "")
		require.Equal(t, http.StatusNotFound, resp.StatusCode, "%s %.120s: %s", tc.method, tc.path, body)
		assert.Equal(t, "application/json", resp.Header.Get("Content-Type"), tc.path)
		var out struct {
			Error struct{ Message, Type, Code string }
		}
		require.NoError(t, json.Unmarshal([]byte(body), &out), body)
		assert.Equal(t, "governor_error", out.Error.Type, tc.path)
		assert.Equal(t, "not_found", out.Error.Code, tc.path)
		assert.Contains(t, out.Error.Message, tc.says, "%s %.120s", tc.method, tc.path)
		assert.Contains(t, out.Error.Message, thePaths, tc.path)
		assert.Less(t, len(out.Error.Message), 500, "the path is not echoed whole: %.120s", tc.path)
	}

	// The job is untouched, and the well-formed paths answer.
	assert.Equal(t, "completed", e.jobStatus(t, st.ID).Status)
	resp, body := e.do(t, "GET", job+"/results?partial=true", "", "")
	assert.Equal(t, http.StatusOK, resp.StatusCode, body)
	resp, body = e.do(t, "POST", job+"/cancel", "", "")
	assert.Equal(t, http.StatusOK, resp.StatusCode, body)
	resp, body = e.do(t, "GET", batch.PathBatches+"/batch_0123456789abcdef/results", "", "")
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, body)
	assert.Contains(t, body, `no batch job \"batch_0123456789abcdef\" (finished jobs expire`)
	resp, body = e.do(t, "PUT", job+"/results", "", "")
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode, body)
	resp, body = e.do(t, "DELETE", job, "", "")
	assert.Equal(t, http.StatusOK, resp.StatusCode, body)
}
