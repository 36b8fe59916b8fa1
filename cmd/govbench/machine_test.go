package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestCommitText(t *testing.T) {
	assert.Equal(t, "4063d44", commitText("4063d44", false, false))
	assert.Equal(t, "4063d44 (with uncommitted changes)", commitText("4063d44", true, false))
	assert.Equal(t, "4063d44, the working tree's; the Governor measured is the -governor binary",
		commitText("4063d44", false, true), "a given binary may come from another commit")
}
