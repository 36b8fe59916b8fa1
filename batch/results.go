package batch

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// resultsStream is the body of a results answer: the JSON document, or
// the OpenAI Batch output lines, rendered one item at a time as fasthttp
// reads it, so that memory holds one row whatever the batch's size. Rows
// not recorded when the stream was made read as PENDING.
type resultsStream struct {
	e         *execution
	rr        rowReader
	done      []bool
	sum       Summary
	conn      net.Conn // the client's; its write deadline bounds a client that stops reading
	writeIdle time.Duration
	onClose   func() // if set, called by Close
	onEnd     func() // if set, called once the last byte is read

	step int // 0 opening, 1 outputs or lines, 2 between, 3 details, 4 summary, 5 end
	i    int
	buf  []byte
}

func newResultsStream(e *execution, now time.Time, conn net.Conn, writeIdle time.Duration) (*resultsStream, error) {
	rr, err := e.rows.reader()
	if err != nil {
		return nil, err
	}
	done, sum := e.progress(now)
	return &resultsStream{e: e, rr: rr, done: done, sum: sum, conn: conn, writeIdle: writeIdle}, nil
}

// Read renders what comes next into p.
func (rs *resultsStream) Read(p []byte) (int, error) {
	for len(rs.buf) == 0 {
		if rs.step == 5 {
			if rs.onEnd != nil {
				rs.onEnd()
				rs.onEnd = nil
			}
			return 0, io.EOF
		}
		if err := rs.next(); err != nil {
			return 0, err
		}
	}
	n := copy(p, rs.buf)
	rs.buf = rs.buf[n:]
	if rs.conn != nil {
		// The chunk is written after Read returns: a client that stops
		// reading fails that write after writeIdle.
		_ = rs.conn.SetWriteDeadline(time.Now().Add(rs.writeIdle))
	}
	return n, nil
}

// Close releases the row reader, then calls onClose.
func (rs *resultsStream) Close() error {
	err := rs.rr.Close()
	if rs.onClose != nil {
		rs.onClose()
		rs.onClose = nil
	}
	return err
}

// next renders the next piece into rs.buf.
func (rs *resultsStream) next() error {
	if rs.e.format == FormatJSONL {
		if rs.i == rs.e.total {
			rs.step = 5
			return nil
		}
		r, err := rs.row(rs.i, true)
		if err != nil {
			return err
		}
		id := fmt.Sprintf("batch_req_%s_%d", strings.TrimPrefix(rs.e.id, "batch_"), rs.i)
		rs.buf, err = json.Marshal(r.openAILine(id, rs.e.customID(rs.i)))
		rs.buf = append(rs.buf, '\n')
		rs.i++
		return err
	}
	switch rs.step {
	case 0:
		rs.buf = []byte(`{"outputs":[`)
		rs.step, rs.i = 1, 0
	case 1, 3:
		if rs.i == rs.e.total {
			rs.step++
			return nil
		}
		r, err := rs.row(rs.i, rs.step == 1)
		if err == nil && r.Body == nil && r.failedAnswer() != nil {
			r, err = rs.row(rs.i, true) // the detail shows the answer
		}
		if err != nil {
			return err
		}
		if rs.i > 0 {
			rs.buf = append(rs.buf[:0], ',')
		}
		if rs.step == 1 {
			rs.buf = append(rs.buf, r.output(rs.e.options.Fallback)...)
		} else {
			d, _ := json.Marshal(r.detail())
			rs.buf = append(rs.buf, d...)
		}
		rs.i++
	case 2:
		rs.buf = []byte(`],"details":[`)
		rs.step, rs.i = 3, 0
	case 4:
		sum, _ := json.Marshal(rs.sum)
		rs.buf = append(append([]byte(`],"summary":`), sum...), "}\n"...)
		rs.step = 5
	}
	return nil
}

// row returns row i, PENDING if it was not recorded when the stream began.
func (rs *resultsStream) row(i int, body bool) (Row, error) {
	if !rs.done[i] {
		return Row{Status: StatusPending}, nil
	}
	r, ok, err := rs.rr.row(i, body)
	if err != nil {
		return Row{}, fmt.Errorf("batch %s: results: %w", rs.e.id, err)
	}
	if !ok {
		return Row{}, fmt.Errorf("batch %s: results: item %d is recorded but not stored", rs.e.id, i)
	}
	return r, nil
}
