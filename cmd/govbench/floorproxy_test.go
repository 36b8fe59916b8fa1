package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

// serve serves srv on a loopback port until the test ends.
func serve(t *testing.T, srv *fasthttp.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		require.NoError(t, srv.Shutdown())
		<-done
	})
	return ln.Addr().String()
}

func TestFloorProxyRelaysJSONWholeAndSSEAsItComes(t *testing.T) {
	release := make(chan struct{})
	upstream := serve(t, &fasthttp.Server{CloseOnShutdown: true, Handler: func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) == "/json" {
			ctx.SetContentType("application/json")
			ctx.SetBodyString(`{"ok":true}`)
			return
		}
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			fmt.Fprint(w, "data: one\n\n")
			_ = w.Flush()
			<-release
			fmt.Fprint(w, "data: two\n\n")
		})
	}})
	proxy := "http://" + serve(t, newFloorProxy(upstream))
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()

	resp, err := client.Get(proxy + "/json")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	assert.JSONEq(t, `{"ok":true}`, string(body))

	resp, err = client.Get(proxy + "/sse")
	require.NoError(t, err)
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	first, err := br.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "data: one\n", first, "the first event arrives while the upstream still holds the second")
	close(release)
	rest, err := io.ReadAll(br)
	require.NoError(t, err)
	assert.Equal(t, "\ndata: two\n\n", string(rest))
}

func TestFloorProxyAnswers502WhenTheUpstreamIsDown(t *testing.T) {
	down := "127.0.0.1:1" // nothing listens there (tcpmux)
	proxy := "http://" + serve(t, newFloorProxy(down))
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	resp, err := client.Get(proxy + "/v1/chat/completions")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusBadGateway, resp.StatusCode)
}

func TestFloorProxyRefusesABadSpec(t *testing.T) {
	assert.ErrorContains(t, serveFloorProxy(t.Context(), "127.0.0.1:0"), floorProxyEnv)
}
