package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/caarlos0/env/v11"

	"github.com/llmgovernor/governor/proxy"
)

// config is Governor's configuration, read from GOVERNOR_* environment
// variables. This file is the only place their names appear. The help tag
// is what `governor -h` prints.
type config struct {
	Listen            string        `env:"GOVERNOR_LISTEN" envDefault:"127.0.0.1:8080" help:"main listener: forwarded calls and /governor/*"`
	AdminListen       string        `env:"GOVERNOR_ADMIN_LISTEN" envDefault:":9090" help:"admin listener: /metrics, /healthz, /readyz"`
	Upstream          string        `env:"GOVERNOR_UPSTREAM" envDefault:"https://api.openai.com" help:"default upstream base URL"`
	Routes            string        `env:"GOVERNOR_ROUTES" help:"prefix routes name=url,...: /name/... goes to url/... with /name stripped"`
	MaxBodyBytes      int           `env:"GOVERNOR_MAX_BODY_BYTES" envDefault:"33554432" help:"largest request body; larger gets 413"`
	AttemptTimeout    time.Duration `env:"GOVERNOR_ATTEMPT_TIMEOUT" envDefault:"10m" help:"one attempt, from dispatch until the answer (for a stream, its headers)"`
	StreamIdleTimeout time.Duration `env:"GOVERNOR_STREAM_IDLE_TIMEOUT" envDefault:"5m" help:"a streamed answer silent this long is ended"`
	ConnectTimeout    time.Duration `env:"GOVERNOR_CONNECT_TIMEOUT" envDefault:"10s" help:"dialing an upstream, and waiting for a free connection to it"`
	DrainTimeout      time.Duration `env:"GOVERNOR_DRAIN_TIMEOUT" envDefault:"30s" help:"after SIGTERM/SIGINT, time to finish queued and in-flight work"`
	LogLevel          string        `env:"GOVERNOR_LOG_LEVEL" envDefault:"info" help:"debug, info, warn or error"`
	LogFormat         string        `env:"GOVERNOR_LOG_FORMAT" envDefault:"json" help:"json or text (to stderr)"`
}

// parsed is config turned into the values the packages take.
type parsed struct {
	config
	upstream  proxy.Route // Name unused
	routes    []proxy.Route
	logLevel  slog.Level
	logFormat string
}

// configError is an invalid setting; main exits 2 with its message.
type configError struct {
	variable string
	err      error
}

func (e *configError) Error() string { return fmt.Sprintf("%s: %v", e.variable, e.err) }
func (e *configError) Unwrap() error { return e.err }

// loadConfig reads the configuration from environ (KEY=VALUE pairs) and
// validates it. Its errors name the variable that is wrong.
func loadConfig(environ []string) (*parsed, error) {
	vars := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			vars[k] = v
		}
	}
	var c config
	if err := env.ParseWithOptions(&c, env.Options{Environment: vars}); err != nil {
		return nil, envError(err)
	}
	p := &parsed{config: c}
	u, err := proxy.ParseUpstreamURL(c.Upstream)
	if err != nil {
		return nil, &configError{"GOVERNOR_UPSTREAM", err}
	}
	p.upstream.URL = u
	if p.routes, err = proxy.ParseRoutes(c.Routes); err != nil {
		return nil, &configError{"GOVERNOR_ROUTES", err}
	}
	for _, r := range p.routes {
		if r.Name == "default" {
			return nil, &configError{"GOVERNOR_ROUTES", errors.New(`route name "default" is taken by GOVERNOR_UPSTREAM`)}
		}
	}
	if err := p.logLevel.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return nil, &configError{"GOVERNOR_LOG_LEVEL", fmt.Errorf("%q: want debug, info, warn or error", c.LogLevel)}
	}
	switch c.LogFormat {
	case "json", "text":
		p.logFormat = c.LogFormat
	default:
		return nil, &configError{"GOVERNOR_LOG_FORMAT", fmt.Errorf("%q: want json or text", c.LogFormat)}
	}
	positive := []struct {
		name string
		ok   bool
	}{
		{"GOVERNOR_MAX_BODY_BYTES", c.MaxBodyBytes > 0},
		{"GOVERNOR_ATTEMPT_TIMEOUT", c.AttemptTimeout > 0},
		{"GOVERNOR_STREAM_IDLE_TIMEOUT", c.StreamIdleTimeout > 0},
		{"GOVERNOR_CONNECT_TIMEOUT", c.ConnectTimeout > 0},
		{"GOVERNOR_DRAIN_TIMEOUT", c.DrainTimeout > 0},
	}
	for _, v := range positive {
		if !v.ok {
			return nil, &configError{v.name, errors.New("must be greater than zero")}
		}
	}
	if c.Listen == "" {
		return nil, &configError{"GOVERNOR_LISTEN", errors.New("empty address")}
	}
	if c.AdminListen == "" {
		return nil, &configError{"GOVERNOR_ADMIN_LISTEN", errors.New("empty address")}
	}
	return p, nil
}

// envError rewrites env's errors, which name struct fields, to name the
// environment variables instead.
func envError(err error) error {
	var agg env.AggregateError
	if errors.As(err, &agg) && len(agg.Errors) > 0 {
		err = agg.Errors[0]
	}
	var pe env.ParseError
	if errors.As(err, &pe) {
		if f, ok := reflect.TypeFor[config]().FieldByName(pe.Name); ok {
			return &configError{f.Tag.Get("env"), pe.Err}
		}
	}
	return err
}

// writeUsage prints the flags and every variable with its default and meaning.
func writeUsage(w io.Writer) {
	fmt.Fprint(w, `Governor governs how fast applications call their LLM providers.

Usage:
  governor [-demo] [-version]

Flags:
  -demo      run in front of a built-in simulated provider (offline)
  -version   print the version and exit
  -h         print this help

Configuration (environment variables, with defaults):
`)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	t := reflect.TypeFor[config]()
	for i := range t.NumField() {
		f := t.Field(i)
		def := f.Tag.Get("envDefault")
		if def == "" {
			def = `""`
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", f.Tag.Get("env"), def, f.Tag.Get("help"))
	}
	tw.Flush()
}
