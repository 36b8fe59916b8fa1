package reqmodel

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestOf(t *testing.T) {
	for in, want := range map[string]string{
		`{"model":"gpt-4o","messages":[]}`:   "gpt-4o",
		`  {"messages":[],"model":"claude"}`: "claude",
		`{"model":5}`:                        "",
		`not json`:                           "",
		``:                                   "",
	} {
		assert.Equal(t, want, Of([]byte(in)), in)
	}
}
