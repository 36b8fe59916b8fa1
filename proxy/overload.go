package proxy

import (
	"bytes"
	"encoding/json"

	"github.com/llmgovernor/governor/lane"
)

// overloadWatch reads the server-sent events of a streamed answer as they
// pass and notes how the provider ended it. A provider that fails once a
// stream has begun with a 200 can no longer say so with a status: it ends
// the stream with an error event instead. Anthropic, once overloaded,
// sends
//
//	event: error
//	data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}
//
// which says what a 529 before the answer would have said; OpenAI sends an
// unnamed event holding only an error object, then [DONE]:
//
//	data: {"error":{"message":"…","type":"server_error","param":null,"code":null}}
//
// A stream that the watch knows by its first event (Anthropic's
// message_start, an OpenAI chat.completion.chunk, a Responses stream's
// response.created) and that stops before its last (message_stop, [DONE],
// response.completed, .incomplete or .failed) was cut, however cleanly its
// bytes ended.
//
// It tells too, read by read, whether the stream carried content or only
// the events a provider sends to keep an idle stream open (see
// isKeepAlive): a batch item's stream, read whole inside its attempt, is
// silent while it carries only keep-alives. One pass over the stream
// thus tells its keep-alives, its content, its last event and an error
// event, as it is read.
//
// It keeps at most maxEventLine bytes of the line being read, or
// maxErrorEventLine in an event named error or response.failed (whose data
// carries the whole response, its instructions and output included):
// longer lines are content, never such an error, so its memory does not
// grow with the stream.
type overloadWatch struct {
	line     []byte // the start of the line being read, up to maxEventLine
	long     bool   // that line is longer than maxEventLine
	errEvent bool   // the event being read is named "error" or "response.failed"
	seen     bool   // an overload error has passed
	// errType is the type of the first error event that passed
	// ("overloaded_error", "server_error"), empty if none did.
	errType string
	// known says the stream began as one whose last event the watch
	// knows; ended says that event has passed; begun that a line of
	// content (not a keep-alive) has passed.
	known, ended, begun bool
}

// maxEventLine bounds the line an error's data may take in an event not
// named as an error's.
const maxEventLine = 1024

// maxErrorEventLine bounds the line of an event named error or
// response.failed.
const maxErrorEventLine = 64 << 10

// maxKeepAliveLine is the longest line read as a keep-alive.
const maxKeepAliveLine = 64

// write reads the next bytes of the stream, and reports whether they held
// content: a line they end, or one in progress already longer than a
// keep-alive, that is no keep-alive (see isKeepAlive). A line that ends in
// p is read where it is; only the start of one that continues in the next
// read is kept.
func (w *overloadWatch) write(p []byte) (content bool) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			w.keep(p)
			// Every byte of a long line is content, however many
			// reads it takes to arrive.
			return content || w.long || len(w.line) > maxKeepAliveLine
		}
		line := p[:i]
		if len(w.line) > 0 || w.long {
			w.keep(line)
			line = w.line
		}
		if w.long {
			w.begun, content = true, true // a line, too long to be read
		} else {
			content = w.readLine(line) || content
		}
		w.line, w.long = w.line[:0], false
		p = p[i+1:]
	}
	return content
}

// keep adds part to the start of the line kept, up to the line's bound
// (see lineBound).
func (w *overloadWatch) keep(part []byte) {
	if w.long || len(w.line)+len(part) > w.lineBound() {
		w.long = true
		return
	}
	w.line = append(w.line, part...)
}

// lineBound is the longest line the watch reads for an error.
func (w *overloadWatch) lineBound() int {
	if w.errEvent {
		return maxErrorEventLine
	}
	return maxEventLine
}

// Markers of the streams whose last event the watch knows.
var (
	lineEnd         = []byte{'\n'}
	chatChunkMarker = []byte(`"chat.completion.chunk"`)
	doneMarker      = []byte("[DONE]")
)

// readLine reads one line of the stream, without its line feed, and
// reports whether it is content rather than a keep-alive.
func (w *overloadWatch) readLine(line []byte) (content bool) {
	content = len(line) > maxKeepAliveLine || !isKeepAlive(line)
	line = bytes.TrimSuffix(line, []byte{'\r'})
	if len(line) == 0 { // the event ends
		w.errEvent = false
		return content
	}
	w.begun = w.begun || content
	if len(line) > w.lineBound() {
		return content
	}
	name, value, _ := bytes.Cut(line, []byte{':'})
	value = bytes.TrimPrefix(value, []byte{' '})
	switch string(name) {
	case "event":
		switch string(value) {
		case "error":
			w.errEvent = true
		case "message_start", "response.created":
			w.known = true
		case "response.failed":
			w.ended, w.errEvent = true, true
		case "message_stop", "response.completed", "response.incomplete":
			w.ended = true
		}
	case "data":
		switch {
		case bytes.Equal(value, doneMarker):
			w.ended = true
		case !w.known && bytes.Contains(value, chatChunkMarker):
			w.known = true
		}
		// An unescaped "error" is a JSON key or value, never text of
		// the answer (whose quotes are escaped): only such lines are
		// parsed.
		if w.errType == "" && (w.errEvent || bytes.Contains(value, []byte(`"error"`))) {
			if t, ok := errorEventType(value); ok {
				w.errType = truncate(t, 64)
				w.seen = t == "overloaded_error"
			}
		}
	}
	return content
}

// isKeepAlive reports whether a line, without its LF, keeps a stream open
// and says nothing: a blank line, an SSE comment line (": keep-alive"), or
// Anthropic's ping event ("event: ping", "data: {"type": "ping"}"). Any
// other line is content.
func isKeepAlive(line []byte) bool {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] == ':' {
		return true
	}
	if v, ok := bytes.CutPrefix(line, []byte("event:")); ok {
		return string(bytes.TrimSpace(v)) == "ping"
	}
	if v, ok := bytes.CutPrefix(line, []byte("data:")); ok && len(v) <= maxKeepAliveLine {
		var b [maxKeepAliveLine]byte
		compact := b[:0]
		for _, c := range v {
			if c != ' ' && c != '\t' {
				compact = append(compact, c)
			}
		}
		return string(compact) == `{"type":"ping"}`
	}
	return false
}

// errorEventType returns the type of the error that an event's data
// holds, if it is an error event: Anthropic's {"type":"error","error":{…}},
// OpenAI's {"error":{…}} in a chat stream, and in a Responses stream
// {"type":"error","code":…} or {"type":"response.failed","response":
// {"error":{"code":…}}} (a failed response whose line fits is read).
func errorEventType(data []byte) (string, bool) {
	var ev struct {
		Type  string  `json:"type"`
		Code  *string `json:"code"`
		Error *struct {
			Type string `json:"type"`
		} `json:"error"`
		Response *struct {
			Error *struct {
				Code string `json:"code"`
			} `json:"error"`
		} `json:"response"`
	}
	if json.Unmarshal(data, &ev) != nil {
		return "", false
	}
	switch {
	case ev.Error != nil:
		return ev.Error.Type, true
	case ev.Type == "error" && ev.Code != nil:
		return *ev.Code, true
	case ev.Type == "response.failed" && ev.Response != nil && ev.Response.Error != nil:
		return ev.Response.Error.Code, true
	}
	return "", false
}

// cutAtClose reads the end of a stream that the upstream's close ended,
// and reports whether the stream was cut: it began as one whose last event
// the watch knows, and neither that event nor an error event has passed.
func (w *overloadWatch) cutAtClose() bool {
	w.write(lineEnd) // the last line, if the stream did not end it
	return w.known && !w.ended && w.errType == ""
}

// outcome is what a stream read whole came to, as an attempt: RateLimited
// when an overload ended it, ServerError when a server error did
// (api_error, server_error), ConnError when it stopped before its last
// event without an error (or before its first: no event stream is empty,
// nor one of keep-alives only),
// else Answered (another error, which a retry cannot fix, included); why
// says it in the attempt's errors.
func (w *overloadWatch) outcome() (o lane.Outcome, why string) {
	switch {
	case w.seen:
		return lane.RateLimited, "stream ended by " + w.errType
	case w.errType == "api_error" || w.errType == "server_error":
		return lane.ServerError, "stream ended by " + w.errType
	case w.errType != "":
		return lane.Answered, "" // an error a retry cannot fix: as sent
	case w.known && !w.ended:
		return lane.ConnError, "stream cut before its last event"
	case !w.begun:
		return lane.ConnError, "stream ended before its first event"
	}
	return lane.Answered, ""
}

// outcome is the outcome of an answer passed on to its client as it
// arrives, once it has ended (closed): RateLimited when an overload error
// passed; ClientGone when the client left or stopped reading first;
// ConnError when the upstream broke it off (a cut chunk, an NDJSON stream
// or a JSON answer closed before its end), fell silent for the idle
// timeout, or stopped an event stream before its last event (or its
// first); ServerError when a server error ended an event stream; else
// Answered (an error a retry cannot fix included), as for a stream read
// whole (see overloadWatch.outcome).
func (b *streamBody) outcome() lane.Outcome {
	if b.overload.seen {
		return lane.RateLimited
	}
	switch b.end() {
	case "client_gone":
		return lane.ClientGone
	case "silent", "cut":
		return lane.ConnError
	}
	if !b.watchOverload { // not an event stream it could read
		return lane.Answered
	}
	o, _ := b.overload.outcome()
	return o
}
