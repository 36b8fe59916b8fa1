package queue

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestParsePriority(t *testing.T) {
	cases := []struct {
		header string
		want   int
	}{
		// What clients send.
		{"", DefaultUrgency},
		{"u=0", 0},
		{"u=7", 7},
		{"u=5, i", 5},
		{"i, u=2", 2},
		{"u=1, i=?1", 1},
		{"u=1,i", 1},
		{"i", DefaultUrgency},
		{"i=?0", DefaultUrgency},

		// Whitespace.
		{"  u=4  ", 4},
		{"\tu=4\t", 4},
		{"i ,\tu=6", 6},
		{"u=2 ,  i", 2},
		{" ", DefaultUrgency},

		// Out of range or not an integer: ignored.
		{"u=8", DefaultUrgency},
		{"u=-1", DefaultUrgency},
		{"u=-0", 0},
		{"u=007", 7},
		{"u=1.5", DefaultUrgency},
		{"u=1.0", DefaultUrgency},
		{"u", DefaultUrgency},
		{"u=?1", DefaultUrgency},
		{`u="1"`, DefaultUrgency},
		{"u=one", DefaultUrgency},
		{"u=(1 2)", DefaultUrgency},
		{"u=:AQID:", DefaultUrgency},
		{"u=@1659578233", DefaultUrgency},
		{"u=999999999999999", DefaultUrgency},

		// Unknown members and parameters are fine.
		{"u=2, foo=bar", 2},
		{`x="a, u=0", u=6`, 6},
		{`x="a, u=0"`, DefaultUrgency},
		{`x="esc \" and \\ ok", u=1`, 1},
		{"u=2;q=1;r", 2},
		{"u=2; q=1", 2},
		{"i;u=0", DefaultUrgency}, // a parameter, not the urgency
		{"a=(1 2 \"x\" y);p=?0, u=0", 0},
		{"a=( 1  2 ), u=0", 0},
		{"a=(), u=0", 0},
		{"a=(1;k=2 3), u=0", 0},
		{"*x=1, u=5", 5},
		{"a=1.123, u=5", 5},
		{"a=-12.5, u=5", 5},
		{"a=tok/en:x, u=5", 5},
		{"a=:aGVsbG8=:, u=5", 5},
		{"a=@-100, u=5", 5},
		{`a=%"f%c3%bc", u=5`, 5},
		{"a=*, u=5", 5},

		// Duplicate keys: the last one counts, whatever it is.
		{"u=1, u=2", 2},
		{"u=1, u=9", DefaultUrgency},
		{"u=1, u", DefaultUrgency},

		// Not a dictionary: the whole field is ignored.
		{"u=1,", DefaultUrgency},
		{",u=1", DefaultUrgency},
		{"u=1,,u=2", DefaultUrgency},
		{"U=1", DefaultUrgency},
		{"u =1", DefaultUrgency},
		{"u= 1", DefaultUrgency},
		{"u=1 i", DefaultUrgency},
		{"u=1;", DefaultUrgency},
		{"u=1, foo=%%", DefaultUrgency},
		{"u=1, 1=2", DefaultUrgency},
		{"u=1, a=\"unterminated", DefaultUrgency},
		{"u=1, a=\"bad \\x escape\"", DefaultUrgency},
		{"u=1, a=(1 2", DefaultUrgency},
		{"u=1, a=(1,2)", DefaultUrgency},
		{"u=1, a=:abc", DefaultUrgency},
		{"u=1, a=:a!c:", DefaultUrgency},
		{"u=1, a=?", DefaultUrgency},
		{"u=1, a=?2", DefaultUrgency},
		{"u=1, a=1.", DefaultUrgency},
		{"u=1, a=1.1234", DefaultUrgency},
		{"u=1, a=1234567890123.1", DefaultUrgency},
		{"u=1, a=1234567890123456", DefaultUrgency},
		{"u=1, a=-", DefaultUrgency},
		{"u=1, a=@1.5", DefaultUrgency},
		{`u=1, a=%"%C3"`, DefaultUrgency},
		{`u=1, a=%"%c"`, DefaultUrgency},
		{`u=1, a=%x`, DefaultUrgency},
		{"u=1, a=\"\x7f\"", DefaultUrgency},
		{"u=1, a=1;1", DefaultUrgency},
		{"u=1, a=1;k=", DefaultUrgency},
		{"u=1, a=(1 ;k)", DefaultUrgency},
		{"u=1, a=(1;k=\"x)", DefaultUrgency},
		{"u=1, a=(1)x", DefaultUrgency},
		{"u=1, a=(\"x)", DefaultUrgency},
		{`u=1, a=%"x`, DefaultUrgency},
		{"u=1, a=%\"\x01\"", DefaultUrgency},
		{"u=1, a=b!#$%&'*+-.^_`|~9", 1},
		{"u=1, a=b,", DefaultUrgency},
		{"u=1, a=b\"", DefaultUrgency},
		{"u=\x00", DefaultUrgency},
		{"u=1\x00", DefaultUrgency},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, ParsePriority([]byte(c.header)), "header %q", c.header)
	}
}

func TestParsePriorityDoesNotAllocate(t *testing.T) {
	headers := [][]byte{
		[]byte("u=5, i"),
		[]byte(`a=(1 2 "x" y);p=?0, b=:aGVsbG8=:, c=%"f%c3%bc", u=0`),
		[]byte("u=1, a=\"unterminated"),
	}
	for _, h := range headers {
		allocs := testing.AllocsPerRun(100, func() { ParsePriority(h) })
		assert.Zero(t, allocs, "header %q", h)
	}
}

func FuzzParsePriority(f *testing.F) {
	for _, s := range []string{
		"", "u=0", "u=7", "u=5, i", "i, u=2", "u=1, i=?1", " u=4 ", "u=8", "u=-1",
		"u=1.5", `x="a, u=0", u=6`, "a=(1 2;k=?0);p, u=0", "a=:aGVsbG8=:, u=5",
		`a=%"f%c3%bc", u=5`, "a=@-100, u=5", "u=1, u=2", "u=1,", "u=1;", "u=1, a=(1 2",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, header []byte) {
		u := ParsePriority(header)
		if u < 0 || u >= Urgencies {
			t.Fatalf("ParsePriority(%q) = %d, want 0..%d", header, u, Urgencies-1)
		}
		// A dictionary that accepts one more member accepts any urgency
		// in it: the last "u" counts.
		if validPrefix(header) {
			for want := range Urgencies {
				h := fmt.Appendf(header[:len(header):len(header)], ", u=%d", want)
				if got := ParsePriority(h); got != want {
					t.Fatalf("ParsePriority(%q) = %d, want %d", h, got, want)
				}
			}
		}
	})
}

// validPrefix reports whether ParsePriority honours a member appended to
// header, that is whether header is a non-empty, valid dictionary.
func validPrefix(header []byte) bool {
	h := append(header[:len(header):len(header)], ", u=6"...)
	return ParsePriority(h) == 6
}
