package reply

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

func TestWriteErrorShapes(t *testing.T) {
	e := Error{Status: 503, Code: "queue_full", Message: "full", RetryAfter: 3600, Final: true}

	var ctx fasthttp.RequestCtx
	WriteError(&ctx, false, e)
	assert.Equal(t, 503, ctx.Response.StatusCode())
	assert.Equal(t, "60", string(ctx.Response.Header.Peek("Retry-After")), "capped at MaxRetryAfter")
	assert.Equal(t, "false", string(ctx.Response.Header.Peek("X-Should-Retry")))
	var oa struct {
		Error struct{ Message, Type, Code string }
	}
	require.NoError(t, json.Unmarshal(ctx.Response.Body(), &oa))
	assert.Equal(t, "full", oa.Error.Message)
	assert.Equal(t, "governor_error", oa.Error.Type)
	assert.Equal(t, "queue_full", oa.Error.Code)

	var actx fasthttp.RequestCtx
	WriteError(&actx, true, Error{Status: 400, Code: "bad_request", Message: "bad"})
	assert.Empty(t, actx.Response.Header.Peek("Retry-After"))
	assert.Empty(t, actx.Response.Header.Peek("X-Should-Retry"))
	var an struct {
		Type  string
		Error struct{ Type, Message string }
	}
	require.NoError(t, json.Unmarshal(actx.Response.Body(), &an))
	assert.Equal(t, "error", an.Type)
	assert.Equal(t, "governor_error", an.Error.Type)
	assert.Equal(t, "bad", an.Error.Message)
}

func TestWriteJSON(t *testing.T) {
	var ctx fasthttp.RequestCtx
	WriteJSON(&ctx, 202, map[string]string{"id": "x"})
	assert.Equal(t, 202, ctx.Response.StatusCode())
	assert.Equal(t, "application/json", string(ctx.Response.Header.ContentType()))
	assert.Equal(t, "{\"id\":\"x\"}\n", string(ctx.Response.Body()))

	WriteJSON(&ctx, 200, func() {})
	assert.Equal(t, 500, ctx.Response.StatusCode(), "a value JSON cannot encode")
}

func TestRawIsAWholeResponse(t *testing.T) {
	raw := Raw(Error{Status: 503, Code: "too_many_connections", Message: "busy", RetryAfter: 90, Final: true})
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, 503, resp.StatusCode)
	assert.True(t, resp.Close, "Connection: close")
	assert.Equal(t, "60", resp.Header.Get("Retry-After"), "capped at MaxRetryAfter")
	assert.Equal(t, "false", resp.Header.Get("X-Should-Retry"))
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	assert.JSONEq(t, `{"error":{"message":"busy","type":"governor_error","code":"too_many_connections"}}`, string(body))
}
