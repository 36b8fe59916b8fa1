package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/template"

	"github.com/llmgovernor/governor/internal/proc"
)

// nginxConfig is the reverse proxy govbench compares Governor with: the
// configuration an operator would write for a keep-alive proxy in front of
// an LLM provider, with streaming untouched (proxy_buffering off).
type nginxConfig struct {
	Dir       string // prefix: pid file, error log, temp paths
	Listen    string // host:port
	Upstream  string // host:port of the provider
	Workers   string // worker_processes: "auto" is one per core
	Keepalive int    // idle upstream connections kept per worker
}

var nginxTemplate = template.Must(template.New("nginx.conf").Parse(`# Written by govbench: a plain keep-alive reverse proxy.
daemon off;
worker_processes {{.Workers}};
pid {{.Dir}}/nginx.pid;
error_log {{.Dir}}/nginx-error.log warn;

events {
    worker_connections 16384;
}

http {
    access_log off;
    client_body_temp_path {{.Dir}}/nginx-temp/client_body;
    proxy_temp_path       {{.Dir}}/nginx-temp/proxy;
    fastcgi_temp_path     {{.Dir}}/nginx-temp/fastcgi;
    uwsgi_temp_path       {{.Dir}}/nginx-temp/uwsgi;
    scgi_temp_path        {{.Dir}}/nginx-temp/scgi;

    upstream provider {
        server {{.Upstream}};
        keepalive {{.Keepalive}};
        keepalive_requests 1000000;
    }

    server {
        listen {{.Listen}};
        keepalive_requests 1000000;

        location / {
            proxy_pass http://provider;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_read_timeout 600s;
        }
    }
}
`))

// render returns the nginx.conf text.
func (c nginxConfig) render() (string, error) {
	var b bytes.Buffer
	if err := nginxTemplate.Execute(&b, c); err != nil {
		return "", fmt.Errorf("nginx config: %w", err)
	}
	return b.String(), nil
}

// nginx is a running nginx; its process is the master, the workers are its
// children (readUsage sums them).
type nginx struct {
	*proc.Process
	url string
}

// startNginx writes a configuration that proxies to upstream (a base URL
// such as http://127.0.0.1:PORT), starts nginx and waits until a request
// through it reaches the provider's /stats.
func startNginx(ctx context.Context, w *workspace, upstream string) (*nginx, error) {
	port, err := proc.FreeAddr()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(w.dir, "nginx")
	if err := os.MkdirAll(filepath.Join(dir, "nginx-temp"), 0o755); err != nil {
		return nil, fmt.Errorf("nginx: %w", err)
	}
	cfg := nginxConfig{
		Dir:       dir,
		Listen:    port,
		Upstream:  strings.TrimPrefix(upstream, "http://"),
		Workers:   "auto",
		Keepalive: 256,
	}
	text, err := cfg.render()
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		return nil, fmt.Errorf("nginx: %w", err)
	}
	// -e: the error log before the configuration is read (nginx >= 1.19.5).
	args := []string{"-p", dir, "-c", conf, "-e", filepath.Join(dir, "nginx-error.log")}
	p, err := startProcess("nginx", w.nginxBin, args, nil, filepath.Join(w.dir, "nginx.log"))
	if err != nil {
		return nil, err
	}
	n := &nginx{Process: p, url: "http://" + port}
	if err := p.WaitHTTP(ctx, n.url+"/stats"); err != nil {
		_ = p.Stop(stopTimeout)
		return nil, err
	}
	return n, nil
}

// nginxVersion returns `nginx -v` without its prefix, or "".
func nginxVersion(ctx context.Context, bin string) string {
	out, err := commandOutput(ctx, bin, "-v")
	if err != nil {
		return ""
	}
	return strings.TrimPrefix(out, "nginx version: ")
}
