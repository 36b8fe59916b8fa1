package batch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/llmgovernor/governor/proxy"
)

// Item is one request of a batch.
type Item struct {
	CustomID string            // may be empty in the JSON format
	Method   string            // always POST once parsed
	URL      string            // a path, routed like a proxied call's
	Header   map[string]string // the item's own headers
	Body     json.RawMessage   // a JSON object
}

// Options steer how a batch runs.
type Options struct {
	// MaxRetries is each item's retry budget; negative means Governor's
	// default (GOVERNOR_MAX_RETRIES).
	MaxRetries int
	// ExitOnError stops the batch at the first item that fails for good:
	// nothing new starts and what has not started becomes DID_NOT_RUN.
	ExitOnError bool
	// Fallback is the output of an item that did not complete; JSON null
	// by default.
	Fallback json.RawMessage
	// Urgency is the RFC 9218 urgency of the batch's items (default 5, so
	// interactive calls at the default 3 overtake them).
	Urgency int
	// Concurrency caps the batch's items waiting or in flight at once;
	// 0 means only the server's window applies.
	Concurrency int
	// Timeout bounds each attempt from dispatch; 0 means Governor's
	// attempt timeout.
	Timeout time.Duration
	// Tenant is whose share of the lanes the items take (see
	// proxy.HeaderTenant). Empty: the batch request's X-Governor-Tenant;
	// without one, an async job is a tenant of its own (its id) and a
	// sync batch takes the default tenant.
	Tenant string
}

// Format is the shape of a batch's input, and so of its answer.
type Format int

const (
	// FormatJSON is {"requests":[…], options…}, answered with
	// {"outputs":[…], "details":[…], "summary":{…}}.
	FormatJSON Format = iota
	// FormatJSONL is the OpenAI Batch input format, one request per line,
	// answered in the OpenAI Batch output format.
	FormatJSONL
)

// Batch is a parsed, validated batch.
type Batch struct {
	Items   []Item
	Options Options
	Format  Format
}

// DefaultUrgency is the urgency of batch items unless the batch says
// otherwise.
const DefaultUrgency = 5

// InputError is a batch that is rejected whole: it names where the input is
// wrong ("requests[3].url", "line 7", "option timeout").
type InputError struct {
	Where string
	Err   error
}

func (e *InputError) Error() string {
	if e.Where == "" {
		return e.Err.Error()
	}
	return e.Where + ": " + e.Err.Error()
}

func (e *InputError) Unwrap() error { return e.Err }

func inputErr(where, format string, args ...any) *InputError {
	return &InputError{Where: where, Err: fmt.Errorf(format, args...)}
}

// parser validates items against the limits and routes of one Server.
type parser struct {
	maxItems  int
	checkPath func(string) error
}

// jsonBatch is the JSON format's body. Unknown fields are errors.
type jsonBatch struct {
	Requests    []json.RawMessage `json:"requests"`
	MaxRetries  *int              `json:"max_retries"`
	ExitOnError *bool             `json:"exit_on_error"`
	Fallback    json.RawMessage   `json:"fallback"`
	Priority    *int              `json:"priority"`
	Concurrency *int              `json:"concurrency"`
	Timeout     json.RawMessage   `json:"timeout"`
	Tenant      *string           `json:"tenant"`
}

// jsonItem is one request of either format. Unknown fields are errors.
type jsonItem struct {
	CustomID *string          `json:"custom_id"`
	Method   string           `json:"method"`
	URL      *string          `json:"url"`
	Headers  *map[string]any  `json:"headers"`
	Body     *json.RawMessage `json:"body"`
}

// parseJSON parses the JSON format.
func (ps *parser) parseJSON(body []byte) (*Batch, error) {
	var jb jsonBatch
	if err := decodeStrict(body, &jb); err != nil {
		if name, ok := strings.CutPrefix(err.Error(), "unknown field "); ok {
			return nil, inputErr("", "unknown option %s (want requests, %s)", name, strings.Join(optionNames, ", "))
		}
		return nil, &InputError{Err: fmt.Errorf("invalid batch: %w", err)}
	}
	if len(jb.Requests) == 0 {
		return nil, inputErr("requests", "the batch has no requests")
	}
	if err := ps.checkCount(len(jb.Requests)); err != nil {
		return nil, err
	}
	b := &Batch{Format: FormatJSON, Items: make([]Item, len(jb.Requests))}
	ids := map[string]int{}
	for i, raw := range jb.Requests {
		where := fmt.Sprintf("requests[%d]", i)
		it, err := ps.item(raw, where, false)
		if err != nil {
			return nil, err
		}
		if err := uniqueID(ids, it.CustomID, i, where, "requests[%d]"); err != nil {
			return nil, err
		}
		b.Items[i] = it
	}
	o, err := jsonOptions(&jb)
	if err != nil {
		return nil, err
	}
	b.Options = o
	return b, nil
}

// parseJSONL parses the OpenAI Batch input format; options come from query.
func (ps *parser) parseJSONL(body []byte, query url.Values) (*Batch, error) {
	o, err := queryOptions(query)
	if err != nil {
		return nil, err
	}
	b := &Batch{Format: FormatJSONL, Options: o}
	ids := map[string]int{}
	for n, line := range bytes.Split(body, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		where := "line " + strconv.Itoa(n+1)
		if err := ps.checkCount(len(b.Items) + 1); err != nil {
			return nil, err
		}
		it, err := ps.item(line, where, true)
		if err != nil {
			return nil, err
		}
		if err := uniqueID(ids, it.CustomID, n+1, where, "line %d"); err != nil {
			return nil, err
		}
		b.Items = append(b.Items, it)
	}
	if len(b.Items) == 0 {
		return nil, inputErr("", "the batch has no requests (an empty JSONL body)")
	}
	return b, nil
}

func (ps *parser) checkCount(n int) error {
	if n > ps.maxItems {
		return inputErr("requests", "more than %d requests in one batch", ps.maxItems)
	}
	return nil
}

// uniqueID records id at position pos and rejects a second use of it.
func uniqueID(ids map[string]int, id string, pos int, where, posFormat string) error {
	if id == "" {
		return nil
	}
	if first, dup := ids[id]; dup {
		return inputErr(where+".custom_id", "duplicate custom_id %q (first used at "+posFormat+")", id, first)
	}
	ids[id] = pos
	return nil
}

// item parses and validates one request.
func (ps *parser) item(raw []byte, where string, needID bool) (Item, error) {
	var ji jsonItem
	if err := decodeStrict(raw, &ji); err != nil {
		return Item{}, &InputError{Where: where, Err: fmt.Errorf("invalid request: %w", err)}
	}
	var it Item
	if ji.CustomID != nil {
		it.CustomID = *ji.CustomID
		if it.CustomID == "" {
			return Item{}, inputErr(where+".custom_id", "empty custom_id (omit it, or give each request its own)")
		}
	} else if needID {
		return Item{}, inputErr(where+".custom_id", "missing custom_id (the OpenAI Batch format requires one per line)")
	}
	it.Method = strings.ToUpper(ji.Method)
	switch it.Method {
	case "":
		it.Method = "POST"
	case "POST":
	default:
		return Item{}, inputErr(where+".method", "unsupported method %q: batch requests are POST", ji.Method)
	}
	if ji.URL == nil || *ji.URL == "" {
		return Item{}, inputErr(where+".url", "missing url (a path such as /v1/chat/completions)")
	}
	it.URL = *ji.URL
	if err := ps.checkPath(it.URL); err != nil {
		return Item{}, &InputError{Where: where + ".url", Err: err}
	}
	if ji.Body == nil || !isObject(*ji.Body) {
		return Item{}, inputErr(where+".body", "want a JSON object, the request body to send")
	}
	it.Body = *ji.Body
	if ji.Headers != nil {
		h, err := itemHeaders(*ji.Headers)
		if err != nil {
			return Item{}, &InputError{Where: where + ".headers", Err: err}
		}
		it.Header = h
	}
	return it, nil
}

// governorHeaders are set by Governor on every item; an item may not set them.
var governorHeaders = []string{"Host", "Content-Length", "Transfer-Encoding", "Connection",
	proxy.HeaderPriority, proxy.HeaderMaxRetries, proxy.HeaderToken}

func itemHeaders(in map[string]any) (map[string]string, error) {
	out := make(map[string]string, len(in))
	for name, v := range in {
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("header %q: want a string value", name)
		}
		if !validHeaderName(name) {
			return nil, fmt.Errorf("invalid header name %q", name)
		}
		if strings.ContainsAny(s, "\r\n\x00") {
			return nil, fmt.Errorf("header %q: value contains a line break or NUL", name)
		}
		for _, g := range governorHeaders {
			if strings.EqualFold(name, g) {
				return nil, fmt.Errorf("header %q is Governor's to set (use the batch options)", name)
			}
		}
		out[name] = s
	}
	return out, nil
}

// validHeaderName reports whether s is an RFC 9110 token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

func isObject(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '{'
}

// decodeStrict decodes exactly one JSON value into v; unknown fields and
// trailing data are errors.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return describeJSONError(data, err)
	}
	if dec.More() {
		return errors.New("unexpected data after the JSON value")
	}
	if _, err := dec.Token(); err == nil {
		return errors.New("unexpected data after the JSON value")
	}
	return nil
}

// describeJSONError turns encoding/json's errors into messages a user can
// act on: unknown fields are named as such, and syntax errors say where.
func describeJSONError(data []byte, err error) error {
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		line, col := position(data, syn.Offset)
		if bytes.IndexByte(data, '\n') < 0 {
			return fmt.Errorf("invalid JSON at column %d: %v", col, syn)
		}
		return fmt.Errorf("invalid JSON at line %d, column %d: %v", line, col, syn)
	}
	var typ *json.UnmarshalTypeError
	if errors.As(err, &typ) {
		if typ.Field != "" {
			return fmt.Errorf("field %s: want %s, got %s", typ.Field, typ.Type, typ.Value)
		}
		return fmt.Errorf("want %s, got %s", typ.Type, typ.Value)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return fmt.Errorf("unknown field %s", name)
	}
	if errors.Is(err, io.EOF) {
		return errors.New("empty body")
	}
	return err
}

// position returns the 1-based line and column of byte offset off.
func position(data []byte, off int64) (line, col int) {
	off = min(max(off, 0), int64(len(data)))
	before := data[:off]
	line = bytes.Count(before, []byte("\n")) + 1
	col = int(off) - bytes.LastIndexByte(before, '\n')
	return line, col
}
