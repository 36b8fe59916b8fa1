package logtest

import (
	"log/slog"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestLinesByMessage(t *testing.T) {
	var b Buffer
	log := slog.New(slog.NewJSONHandler(&b, nil))
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() { log.Info("call", "i", i) })
	}
	wg.Wait()
	log.Info("other")
	assert.Len(t, b.Lines(t, "call"), 10)
	other := b.Lines(t, "other")
	assert.Len(t, other, 1)
	assert.Equal(t, "INFO", other[0]["level"])
	assert.Empty(t, b.Lines(t, "missing"))
}
