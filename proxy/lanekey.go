package proxy

import (
	"crypto/sha256"

	"github.com/valyala/fasthttp"

	"github.com/llmgovernor/governor/internal/reqmodel"
	"github.com/llmgovernor/governor/lane"
)

// credentialHeaders identify the account a call is billed to: each is
// hashed, present or not.
var credentialHeaders = []string{"Authorization", "X-Api-Key", "Openai-Organization", "Openai-Project"}

// presentCredentialHeaders identify it too (Azure OpenAI's api-key), but
// are hashed only when present, so that a call without them keeps the hash
// it has always had: its lane's id, its metric series and its shared
// record in Redis stay the same across Governor versions.
var presentCredentialHeaders = []string{"Api-Key"}

// credentialHash hashes the credential headers of a client's request as
// they are sent upstream: a credential header named in Connection is
// hop-by-hop (see stripHopHeaders), so it counts as absent. The hash is
// shown shortened; the credential itself is never stored. (Not hashed from
// a buffer on the stack in one call, which saves the hasher's allocation:
// the handler's goroutine then grows past 4 KiB of stack before its call
// waits in the queue, and keeps 8 KiB per waiting call; see BENCHMARKS.md.)
func credentialHash(h *fasthttp.RequestHeader) [sha256.Size]byte {
	hop := len(h.Peek(fasthttp.HeaderConnection)) > 0 // most calls have no Connection header
	d := sha256.New()
	for _, name := range credentialHeaders {
		v := h.Peek(name)
		if hop && len(v) > 0 && namedInConnection(h, name) {
			v = nil
		}
		d.Write([]byte(name))
		d.Write([]byte{0})
		d.Write(v)
		d.Write([]byte{0})
	}
	for _, name := range presentCredentialHeaders {
		v := h.Peek(name)
		if len(v) == 0 || (hop && namedInConnection(h, name)) {
			continue
		}
		d.Write([]byte(name))
		d.Write([]byte{0})
		d.Write(v)
		d.Write([]byte{0})
	}
	var sum [sha256.Size]byte
	d.Sum(sum[:0])
	return sum
}

// tooManyLanes is the error that refuses a call whose credential would
// need a lane beyond the bound (lane.ErrTooManyLanes), the bound named
// maxLanes.
func tooManyLanes(maxLanes string) *apiError {
	return &apiError{Status: fasthttp.StatusServiceUnavailable, Code: CodeTooManyLanes, RetryAfter: maxRetryAfterSeconds,
		Message: "Governor: the lane limit (" + maxLanes + ") is reached and no lane has been idle long enough to make room for a new credential; retry later"}
}

// laneOf returns the lane of a client's request to up, or p.tooManyLanes.
// It reads the client's request, not the one built for the upstream (see
// upstreamRequest), and finds the same lane.
func (p *Proxy) laneOf(up *upstream, req *fasthttp.Request) (*lane.Lane, *apiError) {
	l, err := p.lanes.Get(lane.Key{Upstream: up.name, Credential: credentialHash(&req.Header), Model: reqmodel.Of(req.Body())})
	if err != nil {
		return nil, p.tooManyLanes
	}
	return l, nil
}
