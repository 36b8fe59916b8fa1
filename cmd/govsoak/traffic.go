package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// callTimeout bounds one call or batch as the client sees it: far above
// what Governor's retries can take with the soak's settings, so a call
// that hits it counts as lost.
const callTimeout = 5 * time.Minute

// driver sends the soak's traffic to Governor and records every call.
type driver struct {
	base   string // Governor's base URL
	hc     *http.Client
	ledger *ledger
	prefix string // makes the run's request ids unique
	seq    atomic.Int64

	started atomic.Int64 // calls and batch items sent
	workers sync.WaitGroup
}

func newDriver(base string, workers int, l *ledger) *driver {
	tr := &http.Transport{MaxIdleConnsPerHost: 2 * workers, DisableCompression: true, IdleConnTimeout: 30 * time.Second}
	return &driver{base: base, hc: &http.Client{Transport: tr}, ledger: l,
		prefix: strconv.FormatInt(time.Now().UnixNano()%1e9, 36)}
}

func (d *driver) nextID(tag string) string {
	return fmt.Sprintf("soak-%s-%s-%d", d.prefix, tag, d.seq.Add(1))
}

// work runs one worker until ctx ends: each loop sends one call (or batch)
// made by send, which records it.
func (d *driver) work(ctx context.Context, seed uint64, send func(*rand.Rand)) {
	d.workers.Add(1)
	go func() {
		defer d.workers.Done()
		rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
		for ctx.Err() == nil {
			send(rng)
		}
	}()
}

// wait waits for every worker to finish its last call, at most within.
func (d *driver) wait(within time.Duration) bool {
	done := make(chan struct{})
	go func() { d.workers.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(within):
		return false
	}
}

// Forced fault sequences (X-Mock-Fault) and how often a call carries one.
var (
	jsonFaults   = []string{"429", "529", "reset", "reset-mid-stream", "500,503", "429,529", "502", "hang"}
	streamFaults = []string{"429", "529", "reset", "500", "hang"}
	itemFaults   = []string{"429", "529", "reset", "500", "reset-mid-stream"}
)

const forcedFaultShare = 0.12

// pickFault returns a fault sequence for a call, or "" for none. A hang
// (it costs a whole attempt timeout) is picked a tenth as often.
func pickFault(rng *rand.Rand, faults []string) string {
	if rng.Float64() >= forcedFaultShare {
		return ""
	}
	f := faults[rng.IntN(len(faults))]
	if f == "hang" && rng.IntN(10) != 0 {
		f = faults[0]
	}
	return f
}

var (
	models = []string{"gpt-soak-a", "gpt-soak-b"}
	keys   = []string{"sk-soak-key-a", "sk-soak-key-b"}
)

// chat sends one OpenAI chat completion, streamed or not.
func (d *driver) chat(rng *rand.Rand, stream bool) {
	k := kindChat
	faults := jsonFaults
	if stream {
		k, faults = kindStream, streamFaults
	}
	id := d.nextID("chat")
	body := fmt.Sprintf(`{"model":%q,"stream":%t,"messages":[{"role":"user","content":"soak call %s"}]}`,
		models[rng.IntN(len(models))], stream, id)
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Authorization", "Bearer "+keys[rng.IntN(len(keys))])
	h.Set("Priority", fmt.Sprintf("u=%d", 1+rng.IntN(3)))
	if f := pickFault(rng, faults); f != "" {
		h.Set("X-Mock-Fault", f)
		if strings.HasPrefix(f, "429") && rng.IntN(2) == 0 {
			h.Set("X-Mock-Retry-After-Ms", "200")
		}
	}
	d.call(k, id, "/v1/chat/completions", body, h, func(b []byte) bool {
		if stream {
			return bytes.HasSuffix(b, []byte("data: [DONE]\n\n"))
		}
		var v struct{ Choices []json.RawMessage }
		return json.Unmarshal(b, &v) == nil && len(v.Choices) > 0
	})
}

// anthropic sends one Anthropic message through the prefix route.
func (d *driver) anthropic(rng *rand.Rand, stream bool) {
	k := kindAnthropic
	faults := jsonFaults
	if stream {
		k, faults = kindAnthropicStream, streamFaults
	}
	id := d.nextID("anthropic")
	body := fmt.Sprintf(`{"model":"claude-soak","max_tokens":64,"stream":%t,"messages":[{"role":"user","content":"soak call %s"}]}`,
		stream, id)
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("X-Api-Key", keys[rng.IntN(len(keys))])
	h.Set("Anthropic-Version", "2023-06-01")
	if f := pickFault(rng, faults); f != "" {
		h.Set("X-Mock-Fault", f)
	}
	d.call(k, id, "/anthropic/v1/messages", body, h, func(b []byte) bool {
		if stream {
			return bytes.Contains(b, []byte("event: message_stop\n")) && bytes.HasSuffix(b, []byte("\n\n"))
		}
		var v struct {
			Type    string
			Content []json.RawMessage
		}
		return json.Unmarshal(b, &v) == nil && v.Type == "message" && len(v.Content) > 0
	})
}

// call sends one proxied call and records how it ended; whole says
// whether a 200 body is a complete answer.
func (d *driver) call(k kind, id, path, body string, h http.Header, whole func([]byte) bool) {
	d.started.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	start := time.Now()
	r := record{id: id, kind: k}
	defer func() { r.took = time.Since(start); d.ledger.add(r) }()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.base+path, strings.NewReader(body))
	if err != nil {
		panic(err) // the URL is ours
	}
	req.Header = h
	req.Header.Set("X-Request-Id", id)
	resp, err := d.hc.Do(req)
	if err != nil {
		r.outcome, r.why = lost, err.Error()
		return
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	r.attempts, _ = strconv.Atoi(resp.Header.Get("X-Governor-Attempts"))
	switch {
	case err != nil:
		r.outcome, r.why = lost, fmt.Sprintf("%d, body cut: %v", resp.StatusCode, err)
	case resp.StatusCode == http.StatusOK && whole(b):
		r.outcome = completed
	case resp.StatusCode == http.StatusOK:
		r.outcome, r.why = lost, fmt.Sprintf("200 with an incomplete body: %.200q", b)
	case resp.Header.Get("X-Governor-Status") == "FAILED" && json.Valid(b):
		r.outcome, r.why = failed, fmt.Sprintf("%d after %d attempts: %.200s", resp.StatusCode, r.attempts, b)
	default:
		r.outcome, r.why = lost, fmt.Sprintf("%d without a Governor status: %.200q", resp.StatusCode, b)
	}
}

// batchItems builds n batch items with ids of their own, a quarter of
// them Anthropic messages.
func (d *driver) batchItems(rng *rand.Rand, n int, tag string) (items []map[string]any, ids []string) {
	for range n {
		id := d.nextID(tag)
		h := map[string]string{"X-Request-Id": id}
		if f := pickFault(rng, itemFaults); f != "" {
			h["X-Mock-Fault"] = f
		}
		it := map[string]any{"custom_id": id, "headers": h}
		if rng.IntN(4) == 0 {
			h["X-Api-Key"] = keys[rng.IntN(len(keys))]
			h["Anthropic-Version"] = "2023-06-01"
			it["url"] = "/anthropic/v1/messages"
			it["body"] = map[string]any{"model": "claude-soak", "max_tokens": 64,
				"messages": []any{map[string]any{"role": "user", "content": "soak item " + id}}}
		} else {
			it["url"] = "/v1/chat/completions"
			it["body"] = map[string]any{"model": models[rng.IntN(len(models))],
				"messages": []any{map[string]any{"role": "user", "content": "soak item " + id}}}
		}
		items = append(items, it)
		ids = append(ids, id)
	}
	return items, ids
}

// itemRow is one batch item's output and detail.
type itemRow struct {
	Output json.RawMessage `json:"output"`
	Detail struct {
		Status   string   `json:"status"`
		Attempts int      `json:"attempts"`
		Errors   []string `json:"errors"`
	} `json:"detail"`
}

// batchDocument is the JSON answer of a batch.
type batchDocument struct {
	Outputs []json.RawMessage `json:"outputs"`
	Details []json.RawMessage `json:"details"`
}

// recordItems records each item of a batch from its row; a missing row is
// lost.
func (d *driver) recordItems(k kind, ids []string, rows map[int]itemRow, took time.Duration) {
	for i, id := range ids {
		r := record{id: id, kind: k, took: took}
		row, ok := rows[i]
		switch {
		case !ok:
			r.outcome, r.why = lost, "no row in the batch answer"
		case row.Detail.Status == "COMPLETED" || row.Detail.Status == "COMPLETED_WITH_RETRIES":
			r.attempts = row.Detail.Attempts
			var out struct {
				StatusCode int             `json:"status_code"`
				Body       json.RawMessage `json:"body"`
			}
			if json.Unmarshal(row.Output, &out) == nil && out.StatusCode == http.StatusOK && len(out.Body) > 2 {
				r.outcome = completed
			} else {
				r.outcome, r.why = lost, fmt.Sprintf("%s with output %.200s", row.Detail.Status, row.Output)
			}
		case row.Detail.Status == "FAILED":
			r.attempts = row.Detail.Attempts
			r.outcome, r.why = failed, fmt.Sprintf("FAILED after %d attempts: %v", row.Detail.Attempts, row.Detail.Errors)
		default:
			r.attempts = row.Detail.Attempts
			r.outcome, r.why = lost, "status "+row.Detail.Status
		}
		d.ledger.add(r)
	}
}

// rowsOf reads the rows of a JSON batch answer.
func rowsOf(b []byte) (map[int]itemRow, error) {
	var doc batchDocument
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	if len(doc.Outputs) != len(doc.Details) {
		return nil, fmt.Errorf("%d outputs for %d details", len(doc.Outputs), len(doc.Details))
	}
	rows := map[int]itemRow{}
	for i := range doc.Outputs {
		var row itemRow
		row.Output = doc.Outputs[i]
		if err := json.Unmarshal(doc.Details[i], &row.Detail); err != nil {
			return nil, err
		}
		rows[i] = row
	}
	return rows, nil
}

// rowsOfNDJSON reads the rows of an NDJSON progress answer; it requires
// the closing summary line.
func rowsOfNDJSON(b []byte) (map[int]itemRow, error) {
	rows := map[int]itemRow{}
	summary := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var line struct {
			Index   *int            `json:"index"`
			Summary json.RawMessage `json:"summary"`
			itemRow
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return nil, err
		}
		if line.Summary != nil {
			summary = true
			continue
		}
		if line.Index == nil {
			return nil, fmt.Errorf("line without index: %.200s", sc.Bytes())
		}
		rows[*line.Index] = line.itemRow
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !summary {
		return nil, errors.New("no summary line: the stream was cut")
	}
	return rows, nil
}

// syncBatch runs one batch and waits for its answer, as JSON or as NDJSON
// progress.
func (d *driver) syncBatch(rng *rand.Rand, size int) {
	items, ids := d.batchItems(rng, size, "batch")
	d.started.Add(int64(len(ids)))
	ndjson := rng.IntN(2) == 0
	body, _ := json.Marshal(map[string]any{"requests": items})
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.base+"/governor/batch", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+keys[rng.IntN(len(keys))])
	if ndjson {
		req.Header.Set("Accept", "application/x-ndjson")
	}
	start := time.Now()
	rows, err := d.fetchRows(req, ndjson)
	if err != nil {
		d.lostAll(kindBatchItem, ids, err)
		return
	}
	d.recordItems(kindBatchItem, ids, rows, time.Since(start))
}

// asyncBatch submits a batch job, polls it to its end, fetches its results
// and deletes it.
func (d *driver) asyncBatch(rng *rand.Rand, size int) {
	items, ids := d.batchItems(rng, size, "async")
	d.started.Add(int64(len(ids)))
	body, _ := json.Marshal(map[string]any{"requests": items})
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.base+"/governor/batches", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+keys[rng.IntN(len(keys))])
	start := time.Now()
	resp, err := d.hc.Do(req)
	if err != nil {
		d.lostAll(kindAsyncItem, ids, err)
		return
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var job struct{ ID, Status string }
	if resp.StatusCode != http.StatusAccepted || json.Unmarshal(b, &job) != nil || job.ID == "" {
		d.lostAll(kindAsyncItem, ids, fmt.Errorf("create: %d %.200s", resp.StatusCode, b))
		return
	}
	jobURL := d.base + "/governor/batches/" + job.ID
	for job.Status != "completed" {
		if job.Status == "cancelled" {
			d.lostAll(kindAsyncItem, ids, errors.New("job cancelled"))
			return
		}
		select {
		case <-ctx.Done():
			d.lostAll(kindAsyncItem, ids, fmt.Errorf("job %s still %s: %w", job.ID, job.Status, ctx.Err()))
			return
		case <-time.After(200 * time.Millisecond):
		}
		status, b, err := d.get(ctx, http.MethodGet, jobURL)
		if err != nil || status != http.StatusOK || json.Unmarshal(b, &job) != nil {
			d.lostAll(kindAsyncItem, ids, fmt.Errorf("poll: %d %v %.200s", status, err, b))
			return
		}
	}
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, jobURL+"/results", nil)
	rows, err := d.fetchRows(req, false)
	if err != nil {
		d.lostAll(kindAsyncItem, ids, err)
		return
	}
	d.recordItems(kindAsyncItem, ids, rows, time.Since(start))
	if status, b, err := d.get(ctx, http.MethodDelete, jobURL); err != nil || status != http.StatusOK {
		// Not a lost call, but jobs left behind would fill Governor's
		// table of jobs: worth a line in the log.
		fmt.Fprintf(logOut, "govsoak: deleting job %s: %d %v %.200s\n", job.ID, status, err, b)
	}
}

func (d *driver) get(ctx context.Context, method, url string) (int, []byte, error) {
	req, _ := http.NewRequestWithContext(ctx, method, url, nil)
	resp, err := d.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// fetchRows sends req and reads the rows of the batch answer.
func (d *driver) fetchRows(req *http.Request, ndjson bool) (map[int]itemRow, error) {
	resp, err := d.hc.Do(req)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("%d, body cut: %w", resp.StatusCode, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%d %.200s", resp.StatusCode, b)
	}
	if ndjson {
		return rowsOfNDJSON(b)
	}
	return rowsOf(b)
}

func (d *driver) lostAll(k kind, ids []string, err error) {
	for _, id := range ids {
		d.ledger.add(record{id: id, kind: k, outcome: lost, why: err.Error()})
	}
}
