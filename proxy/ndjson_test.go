package proxy

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// ndjsonEnd finds a stream's last line, or its absence, however the
// stream is split across reads, whatever the length of its lines.
func TestNDJSONEndAtEverySplit(t *testing.T) {
	line := `{"model":"llama3","response":"Hi","done":false}` + "\n"
	for _, tc := range []struct {
		name, stream string
		cut          bool
	}{
		{"done", line + `{"model":"llama3","done":true,"context":[1,2,3]}` + "\n", false},
		{"done, no line end", line + `{"done":true}`, false},
		{"done, spaced, then blank lines", line + `{"done": true}` + "\r\n\n", false},
		{"done after a long value", line + `{"response":"` + strings.Repeat("x", 300) + `","done":true}` + "\n", false},
		{"an error line", `{"error":"out of memory"}` + "\n", false},
		{"a pull's success line", `{"status":"pulling manifest"}` + "\n" + `{"status":"success"}` + "\n", false},
		{"a pull cut before its success line", `{"status":"pulling manifest"}` + "\n" + `{"status":"downloading","total":5}` + "\n", true},
		{"a status line longer than success", `{"status":"success","x":1}` + "\n", true},
		{"not done", line + line, true},
		{"done false after done true", `{"done":true}` + "\n" + line, true},
		{"done quoted in a value", `{"response":"\"done\":true","done":false}` + "\n", true},
		{"cut in the last line", line + `{"model":"llama3","do`, true},
		{"empty", "", false},
	} {
		for i := 0; i <= len(tc.stream); i++ {
			for j := i; j <= len(tc.stream); j += max(1, len(tc.stream)/7) {
				var n ndjsonEnd
				n.write([]byte(tc.stream[:i]))
				n.write([]byte(tc.stream[i:j]))
				n.write([]byte(tc.stream[j:]))
				if got := n.cutAtClose(); got != tc.cut {
					assert.Equal(t, tc.cut, got, "%s split at %d and %d", tc.name, i, j)
					return
				}
			}
		}
	}
}
