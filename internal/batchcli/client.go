package batchcli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// pathBatches is Governor's async batch API.
const pathBatches = "/governor/batches"

// jobStatus is GET /governor/batches/{id}.
type jobStatus struct {
	ID      string         `json:"id"`
	Status  string         `json:"status"`
	Total   int            `json:"total"`
	Counts  map[string]int `json:"counts"`
	Stopped string         `json:"stopped"`
	// Stalled says why a running job makes no progress (its batch
	// directory is full), while it does not.
	Stalled string `json:"stalled"`
}

func (s *jobStatus) running() bool { return s.Status == "running" }

// done is the number of items that have a result.
func (s *jobStatus) done() int {
	return s.Counts["COMPLETED"] + s.Counts["COMPLETED_WITH_RETRIES"] + s.Counts["FAILED"] + s.Counts["DID_NOT_RUN"]
}

// allCompleted reports whether every item completed.
func (s *jobStatus) allCompleted() bool {
	return s.Counts["COMPLETED"]+s.Counts["COMPLETED_WITH_RETRIES"] == s.Total
}

// apiError is an answer of Governor's other than the one expected.
type apiError struct {
	status  int
	message string
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s", e.status, e.message) }

// rejected reports whether err is Governor refusing the input itself.
func rejected(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) &&
		(ae.status == http.StatusBadRequest || ae.status == http.StatusRequestEntityTooLarge || ae.status == http.StatusUnsupportedMediaType)
}

// gone reports whether err says the job does not exist.
func gone(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.status == http.StatusNotFound
}

// transient reports whether err may pass by itself: no answer at all, or
// a Governor that is starting, stopping or overloaded.
func transient(err error) bool {
	var ae *apiError
	if !errors.As(err, &ae) {
		return true
	}
	return ae.status == http.StatusBadGateway || ae.status == http.StatusServiceUnavailable ||
		ae.status == http.StatusGatewayTimeout || ae.status == http.StatusTooManyRequests
}

// client talks to Governor's batch API.
type client struct {
	base   string
	token  string
	http   *http.Client
	header http.Header // sent with the submission only
}

func (c *client) request(ctx context.Context, method, path string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("X-Governor-Token", c.token)
	}
	return req, nil
}

// do sends req and decodes a 2xx JSON answer into out.
func (c *client) do(req *http.Request, out any) error {
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return readError(resp)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(out); err != nil {
		return fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, err)
	}
	return nil
}

// readError turns a non-2xx answer into an apiError with Governor's
// message.
func readError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var doc struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	msg := strings.TrimSpace(string(b))
	if json.Unmarshal(b, &doc) == nil && doc.Error.Message != "" {
		msg = doc.Error.Message
	}
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	return &apiError{status: resp.StatusCode, message: msg}
}

// submit posts the JSONL file f as an async job with the given options.
func (c *client) submit(ctx context.Context, f *os.File, size int64, options url.Values) (*jobStatus, error) {
	path := pathBatches
	if len(options) > 0 {
		path += "?" + options.Encode()
	}
	req, err := c.request(ctx, http.MethodPost, path, f)
	if err != nil {
		return nil, err
	}
	req.ContentLength = size
	for k, vs := range c.header {
		req.Header[k] = vs
	}
	req.Header.Set("Content-Type", "application/jsonl")
	var st jobStatus
	if err := c.do(req, &st); err != nil {
		return nil, err
	}
	if st.ID == "" {
		return nil, errors.New("governor answered without a job id")
	}
	return &st, nil
}

func (c *client) status(ctx context.Context, id string, timeout time.Duration) (*jobStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := c.request(ctx, http.MethodGet, pathBatches+"/"+url.PathEscape(id), nil)
	if err != nil {
		return nil, err
	}
	var st jobStatus
	if err := c.do(req, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

func (c *client) cancel(ctx context.Context, id string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// The cancel endpoint, not DELETE: a job that finished meanwhile is
	// left as it is, its results to fetch, where DELETE would forget it.
	req, err := c.request(ctx, http.MethodPost, pathBatches+"/"+url.PathEscape(id)+"/cancel", nil)
	if err != nil {
		return err
	}
	var st jobStatus
	return c.do(req, &st)
}

// results copies a finished job's results to w, and reports whether they
// are JSON lines (a job submitted as JSON has one JSON document).
func (c *client) results(ctx context.Context, id string, w io.Writer) (lines bool, err error) {
	req, err := c.request(ctx, http.MethodGet, pathBatches+"/"+url.PathEscape(id)+"/results", nil)
	if err != nil {
		return false, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, readError(resp)
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	_, err = io.Copy(w, resp.Body)
	return mt != "application/json", err
}
