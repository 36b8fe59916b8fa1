package batch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

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
	// default (proxy.Config.MaxRetries).
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

// bodyBytes is the size of the items' bodies.
func (b *Batch) bodyBytes() int64 {
	var n int64
	for i := range b.Items {
		n += int64(len(b.Items[i].Body))
	}
	return n
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
	Requests    []rawRef        `json:"requests"` // slices of the body, read once each
	MaxRetries  *int            `json:"max_retries"`
	ExitOnError *bool           `json:"exit_on_error"`
	Fallback    json.RawMessage `json:"fallback"`
	Priority    *int            `json:"priority"`
	Concurrency *int            `json:"concurrency"`
	Timeout     json.RawMessage `json:"timeout"`
	Tenant      *string         `json:"tenant"`
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
		if got, ok := strings.CutPrefix(err.Error(), "want an object, got "); ok {
			// The body is valid JSON of another kind: say what the
			// object holds.
			return nil, inputErr("", `invalid batch: want an object such as {"requests": [...]}, got %s`, got)
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
	proxy.HeaderPriority, proxy.HeaderMaxRetries, proxy.HeaderTenant, proxy.HeaderToken}

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

// decodeStrict decodes exactly one JSON value into v, a pointer to a
// struct; unknown fields and trailing data are errors.
//
// It reads data in place: a json.Decoder would first copy the whole value
// into a buffer of its own, grown by doubling, several times the size of a
// large batch. Fields are then checked against v's with a second pass that
// keeps nothing but the names.
func decodeStrict(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return errors.New("empty body")
	}
	if err := json.Unmarshal(data, v); err != nil {
		return describeJSONError(data, err)
	}
	known := jsonFieldNames(reflect.TypeOf(v).Elem())
	for _, name := range objectKeys(data) {
		if !slices.ContainsFunc(known, func(k string) bool { return strings.EqualFold(k, name) }) {
			return fmt.Errorf("unknown field %q", name)
		}
	}
	return nil
}

// objectKeys returns the keys of the JSON object in data, which must be
// valid JSON (nil if it is not an object). One pass over the bytes: the
// values are skipped, not decoded.
func objectKeys(data []byte) []string {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return nil
	}
	var keys []string
	for i = skipSpace(data, i+1); i < len(data) && data[i] == '"'; i = skipSpace(data, i) {
		end := stringEnd(data, i)
		raw := data[i:end]
		key := string(raw[1 : len(raw)-1])
		if bytes.IndexByte(raw, '\\') >= 0 || !utf8.Valid(raw) {
			_ = json.Unmarshal(raw, &key) // valid: it was decoded once
		}
		keys = append(keys, key)
		i = skipSpace(data, end) + 1 // past ':'
		i = valueEnd(data, skipSpace(data, i))
		if i = skipSpace(data, i); i < len(data) && data[i] == ',' {
			i++
		}
	}
	return keys
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the index just past the JSON string that starts at i.
func stringEnd(data []byte, i int) int {
	for i++; i < len(data); i++ {
		switch data[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}

// valueEnd returns the index just past the JSON value that starts at i.
func valueEnd(data []byte, i int) int {
	depth := 0
	for ; i < len(data); i++ {
		switch c := data[i]; c {
		case '"':
			i = stringEnd(data, i) - 1
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i
			}
			depth--
		case ',':
			if depth == 0 {
				return i
			}
		}
		if depth == 0 && (data[i] == '"' || data[i] == '}' || data[i] == ']') {
			return i + 1
		}
	}
	return i
}

// rawRef is a JSON value kept as a slice of the data it was decoded from,
// not a copy (json.RawMessage copies): valid only while that data is.
type rawRef []byte

func (r *rawRef) UnmarshalJSON(b []byte) error {
	*r = b
	return nil
}

// jsonFieldNames returns the JSON names of a struct type's fields.
func jsonFieldNames(t reflect.Type) []string {
	names := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" {
			name = f.Name
		}
		names = append(names, name)
	}
	return names
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
			return fmt.Errorf("field %s: want %s, got %s", typ.Field, jsonKind(typ.Type), typ.Value)
		}
		return fmt.Errorf("want %s, got %s", jsonKind(typ.Type), typ.Value)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return fmt.Errorf("unknown field %s", name)
	}
	if errors.Is(err, io.EOF) {
		return errors.New("empty body")
	}
	return err
}

// jsonKind names the JSON values a Go type decodes from, in JSON's words
// ("an object", not the name of a type of Governor's).
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Pointer:
		return jsonKind(t.Elem())
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	default:
		return "a JSON value"
	}
}

// position returns the 1-based line and column of byte offset off.
func position(data []byte, off int64) (line, col int) {
	off = min(max(off, 0), int64(len(data)))
	before := data[:off]
	line = bytes.Count(before, []byte("\n")) + 1
	col = int(off) - bytes.LastIndexByte(before, '\n')
	return line, col
}
