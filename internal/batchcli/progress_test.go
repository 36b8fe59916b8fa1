package batchcli

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func status(state string, total, completed, retried, failed, didNotRun int) *jobStatus {
	return &jobStatus{ID: "batch_1", Status: state, Total: total, Counts: map[string]int{
		"COMPLETED": completed, "COMPLETED_WITH_RETRIES": retried, "FAILED": failed, "DID_NOT_RUN": didNotRun,
	}}
}

func TestProgressPlainLines(t *testing.T) {
	var out bytes.Buffer
	p := &progress{w: &out, id: "batch_1"}
	t0 := time.Unix(1000, 0)
	p.update(status("running", 1000, 0, 0, 0, 0), t0)
	p.update(status("running", 1000, 50, 0, 0, 0), t0.Add(5*time.Second)) // within 10 s: no line
	p.update(status("running", 1000, 180, 10, 10, 0), t0.Add(20*time.Second))
	p.update(status("cancelled", 1000, 180, 10, 10, 800), t0.Add(21*time.Second)) // the last one always
	assert.Equal(t, ""+
		"batch_1: 0/1000 (0%)  completed 0  failed 0\n"+
		"batch_1: 200/1000 (20%)  10.0/s  ETA 1m20s  completed 180  with retries 10  failed 10\n"+
		"batch_1: 1000/1000 (100%)  9.5/s  completed 180  with retries 10  failed 10  did not run 800  (cancelled)\n",
		out.String())
}

func TestProgressBar(t *testing.T) {
	var out bytes.Buffer
	p := &progress{w: &out, terminal: true}
	t0 := time.Unix(1000, 0)
	p.update(status("running", 100, 0, 0, 0, 0), t0)
	p.update(status("running", 100, 50, 0, 0, 0), t0.Add(10*time.Second))
	p.say("lost Governor")
	assert.Equal(t, ""+
		"\r\033[K[░░░░░░░░░░░░░░░░░░░░░░░░] 0/100 (0%)  completed 0  failed 0"+
		"\r\033[K[████████████░░░░░░░░░░░░] 50/100 (50%)  5.0/s  ETA 10s  completed 50  failed 0"+
		"\nlost Governor\n", out.String())
}

// The rate is measured over the last 30 seconds or so, not since the start.
func TestProgressRateWindow(t *testing.T) {
	p := &progress{w: &bytes.Buffer{}}
	t0 := time.Unix(1000, 0)
	for i := range 61 { // 1 item/s for a minute…
		p.update(status("running", 10000, i, 0, 0, 0), t0.Add(time.Duration(i)*time.Second))
	}
	for i := 1; i <= 40; i++ { // …then 10 items/s
		p.update(status("running", 10000, 60+10*i, 0, 0, 0), t0.Add(time.Duration(60+i)*time.Second))
	}
	r, ok := p.rate()
	assert.True(t, ok)
	assert.InDelta(t, 10, r, 0.01)
	assert.LessOrEqual(t, len(p.samples), 32, "samples are bounded")
	assert.Equal(t, "1m0s", eta(59.6))
	assert.Equal(t, "17m0s", eta(1021))
}

// On a narrow terminal the bar is cut to one column less than its width,
// so that redrawing it in place leaves no wrapped line behind.
func TestProgressBarFitsTheTerminal(t *testing.T) {
	var out bytes.Buffer
	width := 40
	p := &progress{w: &out, terminal: true, width: func() int { return width }}
	t0 := time.Unix(1000, 0)
	p.update(status("running", 100, 50, 0, 0, 0), t0)
	width = 0 // unknown: not cut
	p.update(status("running", 100, 50, 0, 0, 0), t0)
	assert.Equal(t, ""+
		"\r\033[K[████████████░░░░░░░░░░░░] 50/100 (50%)"+
		"\r\033[K[████████████░░░░░░░░░░░░] 50/100 (50%)  completed 50  failed 0", out.String())
}
