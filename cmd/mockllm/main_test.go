package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-nope"},
		{"-latency", "fast"},
		{"-schedule", "20s:speed=3"},
		{"-schedule", "20s"},
		{"-fault-500", "2"},
		{"-fault-overload-mid-stream", "0.6", "-fault-529", "0.6"},
		{"-rate", "-1"},
		{"-chunks", "0"},
		{"-tpm", "-5"},
		{"-knee", "-1"},
		{"-tokens-per-second", "-2"},
		{"extra"},
	} {
		var stderr bytes.Buffer
		code := run(t.Context(), args, io.Discard, &stderr)
		assert.Equal(t, 2, code, "%q", args)
		assert.NotEmpty(t, stderr.String(), "%q explains itself", args)
	}
}

func TestHelp(t *testing.T) {
	var stderr bytes.Buffer
	assert.Equal(t, 0, run(t.Context(), []string{"-h"}, io.Discard, &stderr))
	for _, flag := range []string{
		"-listen", "-latency", "-spread", "-chunk-delay", "-chunks", "-max-concurrency",
		"-rate", "-burst", "-schedule", "-fault-500", "-fault-529", "-fault-reset", "-fault-hang", "-fault-overload-mid-stream", "-seed",
		"-tpm", "-itpm", "-otpm", "-tokens-per-second", "-knee",
	} {
		assert.Contains(t, stderr.String(), flag+" ")
	}
}

func TestServeAndShutdown(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	pr, pw := io.Pipe()
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"-listen", "127.0.0.1:0", "-schedule", "1h:cap=1"}, pw, io.Discard)
		pw.Close()
	}()

	line, err := bufio.NewReader(pr).ReadString('\n')
	require.NoError(t, err)
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	url, ok := strings.CutPrefix(strings.TrimSpace(line), "mockllm listening on ")
	require.True(t, ok, "first line: %q", line)

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Post(url+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, string(body), "Simulated answer to: hi")

	cancel() // as SIGINT would
	select {
	case c := <-code:
		assert.Equal(t, 0, c)
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after cancel")
	}
}
