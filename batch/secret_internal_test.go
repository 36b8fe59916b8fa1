package batch

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A job's secret file is read in both its forms: the credentials with the
// items' headers, or the credentials alone as a flat map (the items'
// headers then in the input), so that a job on disk resumes either way.
func TestDecodeSecret(t *testing.T) {
	for _, c := range []struct {
		in   string
		want jobSecret
	}{
		{`{"creds":{"Authorization":"Bearer a"},"item_headers":{"2":{"X-Api-Key":"k"}}}`,
			jobSecret{Creds: map[string]string{"Authorization": "Bearer a"}, ItemHeaders: map[int]map[string]string{2: {"X-Api-Key": "k"}}}},
		{`{"creds":null}`, jobSecret{}},
		{`{"Authorization":"Bearer a","X-Api-Key":"k"}`, jobSecret{Creds: map[string]string{"Authorization": "Bearer a", "X-Api-Key": "k"}}},
		{`{}`, jobSecret{}},
		{`null`, jobSecret{}},
	} {
		got, err := decodeSecret([]byte(c.in))
		require.NoError(t, err, c.in)
		assert.Equal(t, c.want, got, c.in)
	}
	_, err := decodeSecret([]byte(`{"creds":1}`))
	assert.Error(t, err)
}
