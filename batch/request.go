package batch

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"net/url"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/llmgovernor/governor/proxy"
)

// Reading a batch request: its body in the format its Content-Type names,
// its query options, whether it asks for progress lines, and the
// credentials its items inherit.

// boolQuery reads the query parameter name as a boolean, false when absent.
func boolQuery(ctx *fasthttp.RequestCtx, name string) (bool, error) {
	v := ctx.QueryArgs().Peek(name)
	if v == nil {
		return false, nil
	}
	b, err := strconv.ParseBool(string(v))
	if err != nil {
		return false, fmt.Errorf("%s: want true or false, got %q", name, v)
	}
	return b, nil
}

// parse reads and validates the batch of a request. On failure it has
// answered with the error and returns false.
func (s *Server) parse(ctx *fasthttp.RequestCtx) (*Batch, bool) {
	format, err := inputFormat(ctx.Request.Header.ContentType())
	if err != nil {
		writeError(ctx, fasthttp.StatusUnsupportedMediaType, codeMediaType, err.Error())
		return nil, false
	}
	var b *Batch
	// A file saved as "UTF-8 with BOM" (Windows editors, Excel, PowerShell)
	// starts with one; it is no part of the JSON.
	body := bytes.TrimPrefix(ctx.PostBody(), utf8BOM)
	query, qerr := url.ParseQuery(string(ctx.QueryArgs().QueryString()))
	switch {
	case qerr != nil:
		err = &InputError{Where: "query", Err: qerr}
	case format == FormatJSON && looksLikeJSONL(body):
		err = inputErr("", "the body looks like OpenAI Batch JSONL (one request per line, with custom_id and url) sent as %s: send it with the header \"Content-Type: application/jsonl\"",
			orNone(ctx.Request.Header.ContentType()))
	case format == FormatJSONL:
		b, err = s.parser.parseJSONL(body, query)
	case len(query) > 0:
		err = inputErr("query", "options of a JSON batch go in its body, not in the query")
	default:
		b, err = s.parser.parseJSON(body)
	}
	if err == nil && b.Options.Tenant == "" {
		v, verr := proxy.SingleValue(&ctx.Request.Header, proxy.HeaderTenant)
		switch {
		case verr != nil:
			err = &InputError{Where: proxy.HeaderTenant, Err: verr}
		case len(v) > 0:
			if err = proxy.ValidateTenant(string(v)); err == nil {
				b.Options.Tenant = string(v)
			} else {
				err = &InputError{Where: proxy.HeaderTenant, Err: err}
			}
		}
	}
	if err != nil {
		s.m.rejected.Inc()
		writeError(ctx, fasthttp.StatusBadRequest, codeBadBatch, err.Error())
		return nil, false
	}
	return b, true
}

// utf8BOM is the byte order mark a batch body may start with.
var utf8BOM = []byte("\xef\xbb\xbf")

// looksLikeJSONL reports whether a body sent as JSON is a JSONL batch: its
// first line is one request (custom_id, url or body at the top level, no
// requests).
func looksLikeJSONL(body []byte) bool {
	first, _, _ := bytes.Cut(bytes.TrimSpace(body), []byte("\n"))
	var fields map[string]json.RawMessage
	if json.Unmarshal(first, &fields) != nil {
		return false
	}
	_, requests := fields["requests"]
	_, id := fields["custom_id"]
	_, u := fields["url"]
	_, b := fields["body"]
	return !requests && (id || u || b)
}

// orNone names a request's Content-Type for an error message.
func orNone(contentType []byte) string {
	if len(bytes.TrimSpace(contentType)) == 0 {
		return "no Content-Type"
	}
	return fmt.Sprintf("Content-Type %q", contentType)
}

// inputFormat tells the batch format from a Content-Type.
func inputFormat(contentType []byte) (Format, error) {
	if len(bytes.TrimSpace(contentType)) == 0 {
		return FormatJSON, nil
	}
	mt, _, err := mime.ParseMediaType(string(contentType))
	if err != nil {
		return 0, fmt.Errorf("unreadable Content-Type %q", contentType)
	}
	switch mt {
	case "application/json",
		// curl -d sends this unless told otherwise; nothing else would
		// post a form here.
		"application/x-www-form-urlencoded":
		return FormatJSON, nil
	case "application/jsonl", "application/x-ndjson", "application/x-jsonlines", "application/jsonlines":
		return FormatJSONL, nil
	}
	return 0, fmt.Errorf("unsupported Content-Type %q: send application/json, or application/jsonl for the OpenAI Batch format", mt)
}

// wantsProgress reports whether an Accept header asks for the progress stream.
func wantsProgress(accept []byte) bool {
	for part := range strings.SplitSeq(string(accept), ",") {
		mt, _, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err == nil && mt == "application/x-ndjson" {
			return true
		}
	}
	return false
}

// credentials copies the credential headers of the batch request.
func credentials(h *fasthttp.RequestHeader) map[string]string {
	out := map[string]string{}
	for _, name := range credentialHeaders {
		if v := h.Peek(name); len(v) > 0 {
			out[name] = string(v)
		}
	}
	return out
}
