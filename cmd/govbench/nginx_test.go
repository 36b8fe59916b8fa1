package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNginxConfigRender(t *testing.T) {
	text, err := nginxConfig{
		Dir: "/tmp/w/nginx", Listen: "127.0.0.1:8443", Upstream: "127.0.0.1:9000",
		Workers: "auto", Keepalive: 256,
	}.render()
	require.NoError(t, err)
	for _, want := range []string{
		"daemon off;",
		"worker_processes auto;",
		"pid /tmp/w/nginx/nginx.pid;",
		"server 127.0.0.1:9000;",
		"keepalive 256;",
		"listen 127.0.0.1:8443;",
		"proxy_pass http://provider;",
		"proxy_http_version 1.1;",
		`proxy_set_header Connection "";`, // keep-alive to the upstream
		"proxy_buffering off;",            // SSE passes through
		"access_log off;",
	} {
		assert.Contains(t, text, want)
	}
	assert.NotContains(t, text, "/var/", "every path is under the work directory")
}
