package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestTableMarkdown(t *testing.T) {
	tb := table{header: []string{"name", "value"}, align: "lr"}
	tb.add("a|b", "1")
	tb.add("µs")                       // short row: padded
	tb.add("two\nlines", "12345", "x") // extra cell: dropped
	want := "" +
		"| name      | value |\n" +
		"| --------- | ----: |\n" +
		"| a\\|b      |     1 |\n" +
		"| µs        |       |\n" +
		"| two lines | 12345 |\n"
	assert.Equal(t, want, tb.markdown())
}

func TestConvText(t *testing.T) {
	assert.Equal(t, "n/a", convText(nil))
	cs := []convergence{
		{change: capChange{label: "start"}, after: 1234 * 1e6, ok: true},
		{change: capChange{label: "→8"}},
	}
	assert.Equal(t, "start 1.2 s · →8 none", convText(cs))
}
