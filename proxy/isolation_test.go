package proxy

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/llmgovernor/governor/lane"
)

// chatModel posts a chat completion for model with headers.
func chatModel(t *testing.T, c *http.Client, base, model string, headers map[string]string) int {
	t.Helper()
	req, err := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(`{"model":"`+model+`"}`))
	require.NoError(t, err)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

// Calls with different credentials never share a lane, whichever header
// carries the credential, and even once MaxLanes is reached.
func TestCredentialsNeverShareALane(t *testing.T) {
	checkLeaks(t)
	creds := []map[string]string{
		{"Authorization": "Bearer sk-a"},
		{"Authorization": "Bearer sk-b"},
		{"X-Api-Key": "sk-a"}, // the same secret in another header is another credential
		{"Api-Key": "sk-a"},   // Azure OpenAI's
		{"Api-Key": "sk-b"},
		{"Authorization": "Bearer sk-a", "OpenAI-Organization": "org-1"},
		{"Authorization": "Bearer sk-a", "OpenAI-Organization": "org-2"},
		{"Authorization": "Bearer sk-a", "OpenAI-Project": "proj-1"},
		{"Authorization": "Bearer sk-a", "OpenAI-Project": "proj-2"},
		{}, // no credential at all
	}
	_, up := newRecorder(t)
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up), MaxLanes: len(creds)}))
	c := client(t)
	for _, h := range creds {
		require.Equal(t, 200, chatModel(t, c, base, "m", h))
		require.Equal(t, 200, chatModel(t, c, base, "m", h), "the same credential again: the same lane")
	}
	lanes := lanesOf(t, c, base)
	require.Len(t, lanes, len(creds))
	seen := map[string]bool{}
	for _, l := range lanes {
		assert.False(t, seen[l.Credential], "credential hash %s shared", l.Credential)
		seen[l.Credential] = true
	}

	// MaxLanes is reached: new models share a lane per credential,
	// never across credentials.
	for i, h := range creds[:2] {
		for j := range 3 {
			require.Equal(t, 200, chatModel(t, c, base, fmt.Sprintf("new-%d-%d", i, j), h))
		}
	}
	lanes = lanesOf(t, c, base)
	var overflow []lane.Info
	for _, l := range lanes {
		if l.Model == lane.OtherModel {
			overflow = append(overflow, l)
		}
	}
	require.Len(t, overflow, 2, "one overflow lane per credential")
	assert.NotEqual(t, overflow[0].Credential, overflow[1].Credential)
}

// A lane is chosen by the credential the provider will see, whether it is
// read from the client's request or from the one built for the upstream: a
// credential header named in Connection is hop-by-hop, not sent, so it does
// not count.
func TestHopByHopCredentialIsNotALaneKey(t *testing.T) {
	hash := headersCredentialHash
	none := hash()
	key := hash("Authorization", "Bearer sk-a")
	require.NotEqual(t, none, key)
	for _, conn := range []string{"Authorization", "keep-alive, authorization", " X-Other ,AUTHORIZATION "} {
		assert.Equal(t, none, hash("Authorization", "Bearer sk-a", "Connection", conn), "Connection: %s", conn)
	}
	assert.Equal(t, key, hash("Authorization", "Bearer sk-a", "Connection", "X-Api-Key"), "Connection naming another header")
	assert.Equal(t, key, hash("Authorization", "Bearer sk-a", "X-Api-Key", "sk-b", "Connection", "x-api-key"),
		"Connection naming another credential header")

	// The request sent upstream agrees.
	in := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(in)
	in.Header.Set("Authorization", "Bearer sk-a")
	in.Header.Set("Connection", "Authorization")
	out := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(out)
	buildUpstreamRequest(in, &upstream{scheme: "http", host: "up"}, []byte("/v1/x"), out)
	assert.Empty(t, out.Header.Peek("Authorization"))
	assert.Equal(t, credentialHash(&out.Header), credentialHash(&in.Header))
}

// Azure OpenAI's api-key header is a credential: two keys get two lanes,
// and a hop-by-hop one counts as absent. A call without it keeps the hash
// it had before api-key was read, so its lane id, metric series and
// shared record in Redis stay the same across Governor versions.
func TestAzureAPIKeyIsACredential(t *testing.T) {
	hash := headersCredentialHash
	none := hash()
	a, b := hash("api-key", "azure-a"), hash("api-key", "azure-b")
	assert.NotEqual(t, a, b, "two Azure keys, two lanes")
	assert.NotEqual(t, none, a)
	assert.NotEqual(t, hash("X-Api-Key", "azure-a"), a, "the same secret in another header is another credential")
	assert.NotEqual(t, hash("Authorization", "Bearer t"), hash("Authorization", "Bearer t", "api-key", "azure-a"))
	assert.Equal(t, none, hash("api-key", "azure-a", "Connection", "api-key"), "hop-by-hop: not sent, not a key")

	// The hash of a call without api-key, as it has always been computed.
	before := func(auth string) [32]byte {
		d := sha256.New()
		for _, hv := range [][2]string{{"Authorization", auth}, {"X-Api-Key", ""}, {"Openai-Organization", ""}, {"Openai-Project", ""}} {
			d.Write([]byte(hv[0] + "\x00" + hv[1] + "\x00"))
		}
		var sum [32]byte
		d.Sum(sum[:0])
		return sum
	}
	assert.Equal(t, before(""), none)
	assert.Equal(t, before("Bearer sk-a"), hash("Authorization", "Bearer sk-a"))
}

// Two models whose names differ only past the 64 bytes a lane id shows
// (long fine-tune names), or only in bytes a metric label cannot carry,
// each get a lane of their own, and Governor keeps serving: their lanes'
// metric series once collided, and a second registration panics.
func TestModelsAlikeInTheirLabelsGetLanesOfTheirOwn(t *testing.T) {
	checkLeaks(t)
	_, up := newRecorder(t)
	_, base := startProxy(t, fastRetries(Config{Upstream: mustURL(t, up)}))
	c := client(t)

	long := "ft:gpt-4o-mini-2024-07-18:acme-corporation:sentiment-classifier:"
	models := []string{long + "9xYz1234", long + "9xYz5678", "gpt 4o", "gpt_4o"}
	for _, m := range models {
		require.Equal(t, 200, chatModel(t, c, base, m, nil), m)
	}
	ids := map[string]bool{}
	for _, l := range lanesOf(t, c, base) {
		ids[l.ID] = true
	}
	assert.Len(t, ids, len(models), "one lane id per model")
}

// headersCredentialHash is the credential hash of a request with the
// headers given as name, value pairs.
func headersCredentialHash(headers ...string) [32]byte {
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	for i := 0; i < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	return credentialHash(&req.Header)
}
