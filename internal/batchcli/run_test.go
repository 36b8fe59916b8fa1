package batchcli

import (
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/llmgovernor/governor/internal/leakcheck"
)

// The upload and the download do not ask on Ctrl-C: it ends them.
func TestInterruptibleEndsOnCtrlC(t *testing.T) {
	leakcheck.Check(t)
	interrupt := make(chan os.Signal, 1)
	r := newRunner(Config{Interrupt: interrupt, Stderr: io.Discard})

	ctx, stop := r.interruptible(t.Context())
	assert.NoError(t, ctx.Err())
	interrupt <- os.Interrupt
	<-ctx.Done()
	stop()

	ctx, stop = r.interruptible(t.Context())
	stop() // the step ended first: nothing is left listening
	assert.Error(t, ctx.Err(), "ended by stop")
	assert.Empty(t, interrupt, "a later Ctrl-C is left for the next step")
}
