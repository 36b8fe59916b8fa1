package batch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/llmgovernor/governor/proxy"
)

// optionNames are the batch options, as JSON fields and query parameters.
var optionNames = []string{"max_retries", "exit_on_error", "fallback", "priority", "concurrency", "timeout", "tenant"}

// defaultOptions are the options of a batch that sets none.
func defaultOptions() Options {
	return Options{MaxRetries: -1, Fallback: json.RawMessage("null"), Urgency: DefaultUrgency}
}

// jsonOptions validates the options of the JSON format.
func jsonOptions(jb *jsonBatch) (Options, error) {
	o := defaultOptions()
	if jb.MaxRetries != nil {
		if err := setMaxRetries(&o, *jb.MaxRetries); err != nil {
			return o, err
		}
	}
	if jb.ExitOnError != nil {
		o.ExitOnError = *jb.ExitOnError
	}
	if len(jb.Fallback) > 0 {
		o.Fallback = jb.Fallback
	}
	if jb.Priority != nil {
		if err := setPriority(&o, *jb.Priority); err != nil {
			return o, err
		}
	}
	if jb.Concurrency != nil {
		if err := setConcurrency(&o, *jb.Concurrency); err != nil {
			return o, err
		}
	}
	if len(jb.Timeout) > 0 {
		d, err := parseTimeout(jb.Timeout)
		if err != nil {
			return o, &InputError{Where: "timeout", Err: err}
		}
		o.Timeout = d
	}
	if jb.Tenant != nil {
		if err := setTenant(&o, *jb.Tenant); err != nil {
			return o, err
		}
	}
	return o, nil
}

// queryOptions reads the options of the JSONL format from query parameters.
func queryOptions(q url.Values) (Options, error) {
	o := defaultOptions()
	for name, vs := range q {
		if !slices.Contains(optionNames, name) {
			return o, inputErr("option "+name, "unknown option (want one of %s)", strings.Join(optionNames, ", "))
		}
		if len(vs) != 1 {
			return o, inputErr("option "+name, "given %d times", len(vs))
		}
		v := vs[0]
		var err error
		switch name {
		case "max_retries":
			err = atoiThen(v, func(n int) error { return setMaxRetries(&o, n) })
		case "exit_on_error":
			o.ExitOnError, err = strconv.ParseBool(v)
		case "fallback":
			if !json.Valid([]byte(v)) {
				err = fmt.Errorf("want a JSON value, got %q", v)
			}
			o.Fallback = json.RawMessage(v)
		case "priority":
			err = atoiThen(v, func(n int) error { return setPriority(&o, n) })
		case "concurrency":
			err = atoiThen(v, func(n int) error { return setConcurrency(&o, n) })
		case "timeout":
			o.Timeout, err = parseTimeout(json.RawMessage(strconv.Quote(v)))
		case "tenant":
			err = setTenant(&o, v)
		}
		if err != nil {
			var ie *InputError
			if errors.As(err, &ie) {
				return o, ie
			}
			return o, &InputError{Where: "option " + name, Err: err}
		}
	}
	return o, nil
}

func atoiThen(v string, set func(int) error) error {
	n, err := strconv.Atoi(v)
	if err != nil {
		return fmt.Errorf("want an integer, got %q", v)
	}
	return set(n)
}

func setMaxRetries(o *Options, n int) error {
	if n < 0 || n > proxy.MaxRetriesCeiling {
		return inputErr("max_retries", "want 0 to %d, got %d", proxy.MaxRetriesCeiling, n)
	}
	o.MaxRetries = n
	return nil
}

func setPriority(o *Options, n int) error {
	if n < 0 || n > 7 {
		return inputErr("priority", "want an urgency from 0 (most urgent) to 7, got %d", n)
	}
	o.Urgency = n
	return nil
}

func setConcurrency(o *Options, n int) error {
	if n < 1 {
		return inputErr("concurrency", "want at least 1, got %d", n)
	}
	o.Concurrency = n
	return nil
}

func setTenant(o *Options, name string) error {
	if err := proxy.ValidateTenant(name); err != nil {
		return &InputError{Where: "tenant", Err: err}
	}
	o.Tenant = name
	return nil
}

// maxTimeout bounds the timeout option.
const maxTimeout = 24 * time.Hour

// parseTimeout reads a timeout given as a Go duration string ("30s",
// "1m30s") or a number of seconds.
func parseTimeout(raw json.RawMessage) (time.Duration, error) {
	raw = bytes.TrimSpace(raw)
	var d time.Duration
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		var perr error
		if d, perr = time.ParseDuration(s); perr != nil {
			if secs, ferr := strconv.ParseFloat(s, 64); ferr == nil {
				d, perr = secondsDuration(secs)
			}
		}
		if perr != nil {
			return 0, fmt.Errorf("want a duration such as \"30s\" or a number of seconds, got %q", s)
		}
	} else {
		var secs float64
		if err := json.Unmarshal(raw, &secs); err != nil {
			return 0, fmt.Errorf("want a duration such as \"30s\" or a number of seconds, got %s", raw)
		}
		var perr error
		if d, perr = secondsDuration(secs); perr != nil {
			return 0, perr
		}
	}
	if d <= 0 || d > maxTimeout {
		return 0, fmt.Errorf("want more than 0 and at most %s, got %s", maxTimeout, d)
	}
	return d, nil
}

func secondsDuration(secs float64) (time.Duration, error) {
	if math.IsNaN(secs) || secs <= 0 || secs > maxTimeout.Seconds() {
		return 0, fmt.Errorf("want more than 0 and at most %s, got %v seconds", maxTimeout, secs)
	}
	return time.Duration(secs * float64(time.Second)), nil
}
