package lane

import (
	"bytes"
	"crypto/sha256"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/aimd"
)

// Models whose names differ only past the 64th byte (long fine-tune or
// Bedrock ARN names), or only in characters a metric label cannot carry,
// and credentials whose short hashes coincide, each get a lane with an id
// of its own and their own metric series: the Registry never registers a
// series twice (which panics, taking the process down).
func TestLaneIDsNeverCollide(t *testing.T) {
	set := metrics.NewSet()
	r, err := New(Config{AIMD: aimd.Config{Max: 8}, MaxLanes: 64, Now: (&fakeClock{now: t0}).Now, Metrics: set})
	require.NoError(t, err)
	t.Cleanup(r.Close)

	long := "ft:gpt-4o-mini-2024-07-18:acme-corporation:sentiment-classifier:"
	keys := []Key{
		key("sk", long+"9xYz1234"),
		key("sk", long+"9xYz5678"),
		key("sk", "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-3-5-sonnet-20241022-v2:0"),
		key("sk", "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-3-5-haiku-20241022-v1:0"),
		key("sk", "a b"), key("sk", "a_b"), key("sk", "a?b"),
		key("sk", "é"), key("sk", "ê"), key("sk", "\xff"), key("sk", "\xfe"),
		key("sk", "none"), key("sk", ""),
	}
	// Two credentials that differ only past the 6 bytes a lane shows.
	var c1, c2 [sha256.Size]byte
	c2[sha256.Size-1] = 1
	keys = append(keys, Key{Upstream: "default", Credential: c1, Model: "m"}, Key{Upstream: "default", Credential: c2, Model: "m"})

	ids := map[string]Key{}
	for _, k := range keys {
		l, err := r.Get(k)
		require.NoError(t, err, "%q", k.Model)
		prev, dup := ids[l.ID()]
		require.False(t, dup, "lane id %q of model %q is already that of model %q", l.ID(), k.Model, prev.Model)
		ids[l.ID()] = k
	}
	var out bytes.Buffer
	set.WritePrometheus(&out)
	assert.Equal(t, len(keys), strings.Count(out.String(), "governor_lane_target{"), "one target series per lane")
}

// A model that is plain and short keeps its name in the lane id; any other
// gets a prefix of it and a hash of the whole name, so that two such models
// do not share an id.
func TestLaneIDOfAModel(t *testing.T) {
	r := newTestRegistry(t, &fakeClock{now: t0}, 8)
	l, err := r.Get(key("sk", "gpt-4o-mini"))
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(l.ID(), "default/gpt-4o-mini/"), l.ID())

	long := strings.Repeat("m", 100)
	l, err = r.Get(key("sk", long))
	require.NoError(t, err)
	model := strings.Split(l.ID(), "/")[1]
	assert.Len(t, model, 64, l.ID())
	assert.True(t, strings.HasPrefix(model, strings.Repeat("m", 53)+"~"), l.ID())
}

// A lane keeps at most maxModel bytes of its model's name, however long
// the names request bodies carry (a body may hold 32 MiB): long names alike
// in their first bytes still get lanes of their own, and the same name
// finds its lane again.
func TestLaneKeepsABoundedModelName(t *testing.T) {
	r := newTestRegistry(t, &fakeClock{now: t0}, 8)
	huge := strings.Repeat("m", 1<<20)
	a, err := r.Get(key("sk", huge+"a"))
	require.NoError(t, err)
	b, err := r.Get(key("sk", huge+"b"))
	require.NoError(t, err)
	assert.NotSame(t, a, b, "two names alike in their first MiB")
	again, err := r.Get(key("sk", huge+"a"))
	require.NoError(t, err)
	assert.Same(t, a, again)
	for _, info := range r.Info(t0) {
		assert.LessOrEqual(t, len(info.Model), maxModel)
		assert.True(t, strings.HasPrefix(info.Model, "mmmm"), info.Model[:min(len(info.Model), 80)])
	}
	short, err := r.Get(key("sk", "gpt-4o"))
	require.NoError(t, err)
	assert.Equal(t, "gpt-4o", short.key.Model)
}

// A lane's id is a function of its key, whatever order lanes are made in:
// after a restart, a lane's metric series keep their name. (A model named
// "none" and calls that name none are told apart by the id, not by which
// came first.)
func TestLaneIDDoesNotDependOnOrder(t *testing.T) {
	keys := []Key{key("sk", ""), key("sk", "none"), key("sk", "a b"), key("sk", "a_b"), key("sk", "gpt-4o"),
		key("sk", strings.Repeat("m", 100)), key("sk", strings.Repeat("m", 100)+"x"), key("other", "gpt-4o")}
	ids := func(order []int) map[int]string {
		r := newTestRegistry(t, &fakeClock{now: t0}, 8)
		out := map[int]string{}
		for _, i := range order {
			l, err := r.Get(keys[i])
			require.NoError(t, err)
			out[i] = l.ID()
		}
		return out
	}
	forward, backward := make([]int, len(keys)), make([]int, len(keys))
	for i := range keys {
		forward[i], backward[len(keys)-1-i] = i, i
	}
	a, b := ids(forward), ids(backward)
	for i, k := range keys {
		assert.Equal(t, a[i], b[i], "model %q", k.Model)
		assert.NotContains(t, a[i], "~2", "model %q", k.Model)
	}
	assert.True(t, strings.HasPrefix(a[0], "default/none/"), a[0])
	assert.True(t, strings.HasPrefix(a[1], "default/none~"), "a model named none: %s", a[1])
}
