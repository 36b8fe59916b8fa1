package batch

import (
	"bytes"
	"encoding/json"
	"math"
	"mime"
	"time"

	"github.com/llmgovernor/governor/proxy"
)

// StatusPending marks, in partial results of a running job, an item that
// has not finished yet. It never appears in a finished batch.
const StatusPending proxy.Status = "PENDING"

// Row is how one item ended.
type Row struct {
	Status   proxy.Status
	Attempts int
	// AttemptsBeforeRestart are those of Attempts made in runs that a
	// crash or a shutdown ended before the row was recorded.
	AttemptsBeforeRestart int
	Errors                []string // one short string per failed attempt
	Queue, Execution      time.Duration
	// Lane is the lane the item went through, empty when it got none.
	Lane string

	// The provider's last answer, when there is one.
	StatusCode  int
	ContentType string
	RequestID   string
	Body        []byte

	// Err is Governor's own error when the item has no answer to show
	// (DID_NOT_RUN, or a failure before or instead of an answer).
	Err *proxy.Error
	// HeadStatus is the status the provider's last answer came with
	// when Err stands instead of that answer: a stream or body the
	// provider cut before its end, an answer too large to keep.
	HeadStatus int
}

// statusCode is the provider's last status: that of its answer, else
// that of an answer it began and did not finish; 0 when it never
// answered.
func (r *Row) statusCode() int {
	if r.StatusCode != 0 {
		return r.StatusCode
	}
	return r.HeadStatus
}

// completed reports whether the row's output is the provider's answer
// rather than the fallback.
func (r *Row) completed() bool {
	return r.Status == proxy.StatusCompleted || r.Status == proxy.StatusCompletedWithRetries
}

// drained reports whether the proxy's drain cut the item: Governor shut
// down before it was answered.
func (r *Row) drained() bool {
	return r.Err != nil && r.Err.Code == proxy.CodeDraining
}

// Output is an item's output in the JSON formats: the provider's answer,
// its body as JSON when it is JSON, else as a string.
type Output struct {
	StatusCode int             `json:"status_code"`
	Body       json.RawMessage `json:"body"`
}

// Detail is an item's execution details, in Phoenix's ExecutionDetails terms.
type Detail struct {
	Status   proxy.Status `json:"status"`
	Attempts int          `json:"attempts"`
	// AttemptsBeforeRestart counts those of Attempts sent before
	// Governor restarted (a job kept in a batch directory whose item was
	// in flight at a crash or at the end of a drain); omitted when none.
	AttemptsBeforeRestart int      `json:"attempts_before_restart,omitempty"`
	Errors                []string `json:"errors"`
	QueueSeconds          float64  `json:"queue_seconds"`
	ExecutionSeconds      float64  `json:"execution_seconds"`
	// StatusCode is the provider's last status, 0 (omitted) when it
	// never answered. An item whose answer was cut before its end (a
	// stream broken off) has the status that answer began with.
	StatusCode int `json:"status_code,omitempty"`
	// Response is the provider's last answer to a FAILED item (its error
	// body), omitted otherwise: the output of a FAILED item is the
	// fallback.
	Response *Output `json:"response,omitempty"`
}

// Summary counts a batch's items per status.
type Summary struct {
	Total                int     `json:"total"`
	Completed            int     `json:"COMPLETED"`
	CompletedWithRetries int     `json:"COMPLETED_WITH_RETRIES"`
	Failed               int     `json:"FAILED"`
	DidNotRun            int     `json:"DID_NOT_RUN"`
	WallSeconds          float64 `json:"wall_seconds"`
	// Stopped says why the batch ended early: "exit_on_error",
	// "cancelled", "client_disconnected" or "shutdown"; empty when every
	// item ran.
	Stopped string `json:"stopped,omitempty"`
}

func (s *Summary) add(st proxy.Status) {
	switch st {
	case proxy.StatusCompleted:
		s.Completed++
	case proxy.StatusCompletedWithRetries:
		s.CompletedWithRetries++
	case proxy.StatusFailed:
		s.Failed++
	case proxy.StatusDidNotRun:
		s.DidNotRun++
	}
}

// Document is the answer of the JSON format: outputs[i] and details[i]
// belong to requests[i].
type Document struct {
	Outputs []json.RawMessage `json:"outputs"`
	Details []Detail          `json:"details"`
	Summary Summary           `json:"summary"`
}

// output renders a row's output: the answer, or fallback.
func (r *Row) output(fallback json.RawMessage) json.RawMessage {
	if !r.completed() {
		return fallback
	}
	b, _ := json.Marshal(Output{StatusCode: r.StatusCode, Body: bodyJSON(r.ContentType, r.Body)})
	return b
}

func (r *Row) detail() Detail {
	errs := r.Errors
	if errs == nil {
		errs = []string{}
	}
	return Detail{
		Status:                r.Status,
		Attempts:              r.Attempts,
		AttemptsBeforeRestart: r.AttemptsBeforeRestart,
		Errors:                errs,
		QueueSeconds:          round3(r.Queue.Seconds()),
		ExecutionSeconds:      round3(r.Execution.Seconds()),
		StatusCode:            r.statusCode(),
		Response:              r.failedAnswer(),
	}
}

// failedAnswer is the provider's answer to a FAILED item, nil if it has
// none.
func (r *Row) failedAnswer() *Output {
	if r.Status != proxy.StatusFailed || r.StatusCode == 0 {
		return nil
	}
	return &Output{StatusCode: r.StatusCode, Body: bodyJSON(r.ContentType, r.Body)}
}

// bodyJSON returns an answer body as a JSON value: itself when it is JSON,
// else a JSON string.
func bodyJSON(contentType string, body []byte) json.RawMessage {
	if isJSONType(contentType) && json.Valid(body) {
		var buf bytes.Buffer
		if json.Compact(&buf, body) == nil {
			return buf.Bytes()
		}
	}
	s, _ := json.Marshal(string(body))
	return s
}

func isJSONType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || len(mt) > 5 && mt[len(mt)-5:] == "+json"
}

// round3 keeps durations readable: milliseconds are enough.
func round3(s float64) float64 { return math.Round(s*1000) / 1000 }

// openAILine is one line of the OpenAI Batch output format.
type openAILine struct {
	ID       string          `json:"id"`
	CustomID string          `json:"custom_id"`
	Response *openAIResponse `json:"response"`
	Error    *openAIError    `json:"error"`
}

type openAIResponse struct {
	StatusCode int             `json:"status_code"`
	RequestID  string          `json:"request_id"`
	Body       json.RawMessage `json:"body"`
}

type openAIError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Error codes of rows without a provider answer, in the OpenAI Batch
// output format.
const (
	codeDidNotRun = "did_not_run"
	codeFailed    = "failed"
)

// openAILine renders a row in the OpenAI Batch output format: the
// provider's last answer whatever its status, or an error when there is
// none.
func (r *Row) openAILine(id, customID string) openAILine {
	l := openAILine{ID: id, CustomID: customID}
	switch {
	case r.StatusCode != 0:
		l.Response = &openAIResponse{StatusCode: r.StatusCode, RequestID: r.RequestID, Body: bodyJSON(r.ContentType, r.Body)}
	case r.Err != nil:
		l.Error = &openAIError{Code: r.Err.Code, Message: r.Err.Message}
	case r.Status == proxy.StatusDidNotRun:
		l.Error = &openAIError{Code: codeDidNotRun, Message: "the batch stopped before this request ran"}
	case r.Status == StatusPending:
		l.Error = &openAIError{Code: "pending", Message: "this request has not finished yet"}
	default:
		l.Error = &openAIError{Code: codeFailed, Message: "no answer"}
	}
	return l
}

// progressLine is one line of the progress stream: an item as it finishes.
type progressLine struct {
	Index    int             `json:"index"`
	CustomID string          `json:"custom_id,omitempty"`
	Output   json.RawMessage `json:"output"`
	Detail   Detail          `json:"detail"`
}

// summaryLine ends the progress stream.
type summaryLine struct {
	Summary Summary `json:"summary"`
}
