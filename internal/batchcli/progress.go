package batchcli

import (
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// progress draws a job's progress on stderr: a bar redrawn in place on a
// terminal, plain lines (at most one per plainEvery, and the last) when
// stderr is a file or a pipe.
type progress struct {
	w        io.Writer
	terminal bool
	width    func() int // the terminal's columns; nil or 0: unknown
	id       string

	samples   []sample // recent (time, items that ran), oldest first, for the rate
	drawn     bool     // a bar is on the current line
	lastPlain time.Time
	lastLine  string
}

type sample struct {
	at  time.Time
	ran int // items that ran: done, less those that did not run
}

const (
	rateWindow = 30 * time.Second // the rate is measured over this much
	plainEvery = 10 * time.Second
	barWidth   = 24
)

// update records st at now and draws it.
func (p *progress) update(st *jobStatus, now time.Time) {
	// Items that did not run come all at once when a job stops: they are
	// no part of the rate.
	p.samples = append(p.samples, sample{now, st.done() - st.Counts["DID_NOT_RUN"]})
	for len(p.samples) > 2 && now.Sub(p.samples[1].at) >= rateWindow {
		p.samples = p.samples[1:]
	}
	line := p.line(st)
	switch {
	case p.terminal:
		fmt.Fprintf(p.w, "\r\033[K%s", p.fit(line))
		p.drawn = true
	case !st.running() || now.Sub(p.lastPlain) >= plainEvery && line != p.lastLine:
		fmt.Fprintln(p.w, line)
		p.lastPlain, p.lastLine = now, line
	}
}

// fit cuts line to one column less than the terminal's width, so that the
// terminal does not wrap it: a carriage return goes back to the start of
// the last row only, and the next redraw would leave the others behind.
func (p *progress) fit(line string) string {
	if p.width == nil {
		return line
	}
	w := p.width() - 1
	if w <= 0 || utf8.RuneCountInString(line) <= w {
		return line
	}
	return string([]rune(line)[:w])
}

// rate returns items finished per second over the recent samples, and
// whether there are enough to tell.
func (p *progress) rate() (float64, bool) {
	if len(p.samples) < 2 {
		return 0, false
	}
	first, last := p.samples[0], p.samples[len(p.samples)-1]
	d := last.at.Sub(first.at).Seconds()
	if d <= 0 {
		return 0, false
	}
	return float64(last.ran-first.ran) / d, true
}

// line renders st: done/total, the rate, the time left and the counts.
func (p *progress) line(st *jobStatus) string {
	done := st.done()
	var b strings.Builder
	if p.terminal {
		filled := 0
		if st.Total > 0 {
			filled = done * barWidth / st.Total
		}
		b.WriteString("[" + strings.Repeat("█", filled) + strings.Repeat("░", barWidth-filled) + "] ")
	} else {
		fmt.Fprintf(&b, "%s: ", p.id)
	}
	pct := 100
	if st.Total > 0 {
		pct = done * 100 / st.Total
	}
	fmt.Fprintf(&b, "%d/%d (%d%%)", done, st.Total, pct)
	if r, ok := p.rate(); ok {
		fmt.Fprintf(&b, "  %.1f/s", r)
		if left := st.Total - done; st.running() && left > 0 {
			if r > 0 {
				fmt.Fprintf(&b, "  ETA %s", eta(float64(left)/r))
			} else {
				b.WriteString("  ETA -")
			}
		}
	}
	fmt.Fprintf(&b, "  completed %d", st.Counts["COMPLETED"])
	if n := st.Counts["COMPLETED_WITH_RETRIES"]; n > 0 {
		fmt.Fprintf(&b, "  with retries %d", n)
	}
	fmt.Fprintf(&b, "  failed %d", st.Counts["FAILED"])
	if n := st.Counts["DID_NOT_RUN"]; n > 0 {
		fmt.Fprintf(&b, "  did not run %d", n)
	}
	if !st.running() {
		fmt.Fprintf(&b, "  (%s)", st.Status)
	}
	return b.String()
}

// eta renders seconds left, to the second below ten minutes and to the
// minute above.
func eta(s float64) string {
	d := time.Duration(s * float64(time.Second))
	if d >= 10*time.Minute {
		return d.Round(time.Minute).String()
	}
	return d.Round(time.Second).String()
}

// say prints a message on a line of its own, leaving the bar's line first.
func (p *progress) say(format string, args ...any) {
	p.endLine()
	fmt.Fprintf(p.w, format+"\n", args...)
}

// endLine ends the bar's line, if one is drawn.
func (p *progress) endLine() {
	if p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
}
