package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// Tenants: how one lane is shared (X-Governor-Tenant). The lane is held
// at tenantsLimit calls in flight (GOVERNOR_MAX_CONCURRENCY and
// GOVERNOR_AIMD_INITIAL) in front of a provider with no limit of its own
// that answers in tenantsLatency (with the goodput scenarios' spread), so
// the lane's limit, not the provider, is what the tenants share. Each part runs twice: with tenants, and with
// every call of one tenant (first in, first out within an urgency, the
// order of a lane whose calls name no tenant).
//
//   - clients: 2 closed-loop clients of one tenant and 32 of another, for
//     -tenants-duration. The figure is the small tenant's share of the
//     calls completed after the first second. It can use at most its 2
//     calls in flight of the lane's 4, less the moment each call waits for
//     a slot after the previous one ended (a freed slot goes at once to a
//     call already waiting).
//   - jobs: two async batch jobs of the same size, each holding up to
//     tenantsJobWindow items waiting or in flight (GOVERNOR_BATCH_WINDOW),
//     the second submitted tenantsJobGap after the first; the figures are
//     how long the second waits for its first result, and each job's
//     items per second while both run. Each job is a tenant of its own
//     unless it names one; the second run gives both the same tenant
//     option.

const (
	tenantsLimit   = 4
	tenantsLatency = 100 * time.Millisecond
	tenantsJobGap  = 2 * time.Second
	// tenantsJobWindow is each job's items waiting or in flight: far more
	// than the lane's limit, as when a provider's cap holds a lane low.
	tenantsJobWindow = 64
	tenantsWarmup    = time.Second

	tenantsSmall, tenantsLarge = 2, 32 // clients
)

// tenantsResult is the outcome of the tenants scenario.
type tenantsResult struct {
	clients []tenantsClientsRun
	jobs    []tenantsJobsRun
}

type tenantsClientsRun struct {
	tenants      bool  // each group of clients named its tenant
	small, large int64 // calls completed after the warm-up, by group
	failed       int64
	limit        int // the lane's limit at the end
}

func (r tenantsClientsRun) share() float64 {
	if r.small+r.large == 0 {
		return 0
	}
	return float64(r.small) / float64(r.small+r.large)
}

type tenantsJobsRun struct {
	tenants bool    // each job its own tenant (else one tenant option for both)
	rate1   float64 // items per second while both ran
	rate2   float64
	overlap time.Duration // how long both ran, measured
	items   int           // per job
	first2  time.Duration // from job 2's submission to its first result
}

// runTenants runs the tenants scenario.
func runTenants(ctx context.Context, w *workspace, o *options, log io.Writer) (res tenantsResult, err error) {
	for _, named := range []bool{true, false} {
		r, err := runTenantsClients(ctx, w, o, named, log)
		if err != nil {
			return res, err
		}
		res.clients = append(res.clients, r)
	}
	for _, own := range []bool{true, false} {
		r, err := runTenantsJobs(ctx, w, o, own, log)
		if err != nil {
			return res, err
		}
		res.jobs = append(res.jobs, r)
	}
	return res, nil
}

// startTenantsLane starts the provider and a Governor whose lane is held at
// tenantsLimit.
func startTenantsLane(ctx context.Context, w *workspace, o *options, name string, g *group, extra ...string) (*governor, error) {
	m, err := startMock(ctx, w, name+"-mockllm", mockConfig{latency: tenantsLatency, spread: latencySpread, seed: o.seed})
	if err != nil {
		return nil, err
	}
	g.add(m.Process)
	env := []string{
		fmt.Sprintf("GOVERNOR_MAX_CONCURRENCY=%d", tenantsLimit),
		fmt.Sprintf("GOVERNOR_AIMD_INITIAL=%d", tenantsLimit),
	}
	env = append(env, extra...)
	gov, err := startGovernor(ctx, w, name+"-governor", m.url, append(env, o.governorEnv...)...)
	if err != nil {
		return nil, err
	}
	g.add(gov.Process)
	return gov, nil
}

func runTenantsClients(ctx context.Context, w *workspace, o *options, named bool, log io.Writer) (res tenantsClientsRun, err error) {
	res.tenants = named
	fmt.Fprintf(log, "govbench: tenants, %d clients against %d, tenants %t, %v\n", tenantsSmall, tenantsLarge, named, o.tenantsDuration)
	var g group
	defer func() { err = errors.Join(err, g.stopAll()) }()
	gov, err := startTenantsLane(ctx, w, o, "tenants-clients", &g)
	if err != nil {
		return res, err
	}
	url := gov.url + "/v1/chat/completions"
	body := chatBody(false)
	lc := newLoadClient(tenantsSmall + tenantsLarge)
	defer lc.close()

	var mu sync.Mutex
	t0 := time.Now()
	until := tenantsWarmup + o.tenantsDuration
	client := func(small bool) {
		rq := request{url: url, body: body, header: http.Header{}}
		if named {
			rq.header.Set("X-Governor-Tenant", map[bool]string{true: "small", false: "large"}[small])
		}
		buf := make([]byte, 32<<10)
		for ctx.Err() == nil && time.Since(t0) < until {
			r := lc.call(ctx, t0, rq, buf)
			mu.Lock()
			switch {
			case !r.ok():
				res.failed++
			case r.Start < tenantsWarmup || r.End > until:
			case small:
				res.small++
			default:
				res.large++
			}
			mu.Unlock()
		}
	}
	var wg sync.WaitGroup
	for i := range tenantsSmall + tenantsLarge {
		wg.Go(func() { client(i < tenantsSmall) })
	}
	wg.Wait()
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	li, err := gov.lanes(ctx)
	if err != nil {
		return res, err
	}
	res.limit = li.Limit
	return res, g.alive()
}

func runTenantsJobs(ctx context.Context, w *workspace, o *options, own bool, log io.Writer) (res tenantsJobsRun, err error) {
	res.tenants = own
	// Enough items that neither job ends before the measurement does: the
	// lane's whole throughput for the gap, the duration and a margin.
	perSecond := float64(tenantsLimit) / tenantsLatency.Seconds()
	res.items = int(perSecond * (tenantsJobGap + o.tenantsDuration + 2*time.Second).Seconds())
	fmt.Fprintf(log, "govbench: tenants, two jobs of %d items %v apart, own tenants %t\n", res.items, tenantsJobGap, own)
	var g group
	defer func() { err = errors.Join(err, g.stopAll()) }()
	gov, err := startTenantsLane(ctx, w, o, "tenants-jobs", &g, fmt.Sprintf("GOVERNOR_BATCH_WINDOW=%d", tenantsJobWindow))
	if err != nil {
		return res, err
	}
	query := "?max_retries=0"
	if !own {
		query += "&tenant=shared"
	}
	input := jobInput(res.items)
	id1, err := submitJob(ctx, gov, query, input)
	if err != nil {
		return res, err
	}
	var ids []string
	defer func() {
		for _, id := range ids {
			_ = cancelJob(gov, id) // they would run on to the end
		}
	}()
	ids = append(ids, id1)
	if err := sleepCtx(ctx, tenantsJobGap); err != nil {
		return res, err
	}
	id2, err := submitJob(ctx, gov, query, input)
	if err != nil {
		return res, err
	}
	ids = append(ids, id2)
	t2 := time.Now()
	for {
		n, err := jobDone(ctx, gov, id2)
		if err != nil {
			return res, err
		}
		if n > 0 {
			res.first2 = time.Since(t2)
			break
		}
		if time.Since(t2) > time.Minute {
			return res, fmt.Errorf("tenants: job 2 had no result after a minute")
		}
		if err := sleepCtx(ctx, 10*time.Millisecond); err != nil {
			return res, err
		}
	}
	// Measure from a second after the second job starts (or its first
	// result, if later), for the duration, or until either job ends.
	if err := sleepCtx(ctx, tenantsWarmup-time.Since(t2)); err != nil {
		return res, err
	}
	a1, err := jobDone(ctx, gov, id1)
	if err != nil {
		return res, err
	}
	a2, err := jobDone(ctx, gov, id2)
	if err != nil {
		return res, err
	}
	start := time.Now()
	var b1, b2 int
	for {
		if err := sleepCtx(ctx, 250*time.Millisecond); err != nil {
			return res, err
		}
		if b1, err = jobDone(ctx, gov, id1); err != nil {
			return res, err
		}
		if b2, err = jobDone(ctx, gov, id2); err != nil {
			return res, err
		}
		if time.Since(start) >= o.tenantsDuration || b1 == res.items || b2 == res.items {
			break
		}
	}
	res.overlap = time.Since(start)
	res.rate1 = float64(b1-a1) / res.overlap.Seconds()
	res.rate2 = float64(b2-a2) / res.overlap.Seconds()
	return res, g.alive()
}

// jobInput is an OpenAI Batch JSONL input of n chat completions.
func jobInput(n int) []byte {
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, `{"custom_id":"i%d","method":"POST","url":"/v1/chat/completions","body":%s}`+"\n", i, chatBody(false))
	}
	return b.Bytes()
}

// submitJob posts an async JSONL job and returns its id.
func submitJob(ctx context.Context, gov *governor, query string, input []byte) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, gov.url+"/governor/batches"+query, bytes.NewReader(input))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/jsonl")
	resp, err := adminClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("submit a job: %w", err)
	}
	defer resp.Body.Close()
	var st struct {
		ID string `json:"id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || resp.StatusCode != http.StatusAccepted {
		return "", fmt.Errorf("submit a job: status %d: %v", resp.StatusCode, err)
	}
	return st.ID, nil
}

// jobDone returns how many of a job's items have finished.
func jobDone(ctx context.Context, gov *governor, id string) (int, error) {
	var st struct {
		Counts map[string]int `json:"counts"`
	}
	if err := getJSON(ctx, gov.url+"/governor/batches/"+id, &st); err != nil {
		return 0, fmt.Errorf("job %s: %w", id, err)
	}
	n := 0
	for status, c := range st.Counts {
		if status != "PENDING" {
			n += c
		}
	}
	return n, nil
}

func cancelJob(gov *governor, id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, gov.url+"/governor/batches/"+id, nil)
	if err != nil {
		return err
	}
	resp, err := adminClient.Do(req)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func writeTenants(w io.Writer, r tenantsResult) {
	fmt.Fprintf(w, "\n## Tenants\n\n")
	ct := table{
		header: []string{"tenants", "lane limit", "calls (small / large)", "small tenant's share", "at most", "failed"},
		align:  "lrrrrr",
	}
	fair := float64(tenantsSmall) / float64(tenantsLimit)
	for _, c := range r.clients {
		name := "one (no header)"
		if c.tenants {
			name = fmt.Sprintf("%d clients `small`, %d `large`", tenantsSmall, tenantsLarge)
		}
		ct.add(name, fmt.Sprint(c.limit), fmt.Sprintf("%d / %d", c.small, c.large),
			fmt.Sprintf("%.2f", c.share()), fmt.Sprintf("%.2f", fair), fmt.Sprint(c.failed))
	}
	fmt.Fprintf(w, "%d closed-loop clients of one tenant against %d of another on one lane of limit %d (provider latency %v). "+
		"The small tenant can use at most its %d calls' share of the slots; each of its calls also waits for a slot to be freed after its previous one ended.\n\n%s",
		tenantsSmall, tenantsLarge, tenantsLimit, tenantsLatency, tenantsSmall, ct.markdown())

	jt := table{
		header: []string{"tenants", "items per job", "job 2's first result after", "job 1 items/s", "job 2 items/s", "job 2 / job 1", "measured"},
		align:  "lrrrrrr",
	}
	for _, j := range r.jobs {
		name := "one (`tenant=shared` on both)"
		if j.tenants {
			name = "each job its own (default)"
		}
		jt.add(name, fmt.Sprint(j.items), millis(j.first2), fmt.Sprintf("%.1f", j.rate1), fmt.Sprintf("%.1f", j.rate2),
			ratio(j.rate2, j.rate1), secs(j.overlap))
	}
	fmt.Fprintf(w, "\nTwo async jobs, each with up to %d items waiting or in flight, the second submitted %v after the first, on the same lane: "+
		"how long the second waits for its first result, and the rates while both run.\n\n%s",
		tenantsJobWindow, tenantsJobGap, jt.markdown())
}
