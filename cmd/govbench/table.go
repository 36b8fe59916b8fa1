package main

import (
	"strings"
	"unicode/utf8"
)

// table is a Markdown table, rendered with padded columns so that it reads
// as well in a terminal as on a rendered page.
type table struct {
	header []string
	align  string // one byte per column: 'l' or 'r'; missing means 'l'
	rows   [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

// markdown renders the table. Cells are escaped ('|' and newlines); rows
// shorter than the header are padded with empty cells.
func (t *table) markdown() string {
	n := len(t.header)
	cells := make([][]string, 0, len(t.rows)+1)
	for _, r := range append([][]string{t.header}, t.rows...) {
		row := make([]string, n)
		for i := range min(n, len(r)) {
			row[i] = escapeCell(r[i])
		}
		cells = append(cells, row)
	}
	width := make([]int, n)
	for _, row := range cells {
		for i, c := range row {
			width[i] = max(width[i], utf8.RuneCountInString(c), 3)
		}
	}
	var b strings.Builder
	line := func(row []string) {
		b.WriteString("|")
		for i, c := range row {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if t.right(i) {
				b.WriteString(" " + pad + c + " |")
			} else {
				b.WriteString(" " + c + pad + " |")
			}
		}
		b.WriteString("\n")
	}
	line(cells[0])
	b.WriteString("|")
	for i := range n {
		if t.right(i) {
			b.WriteString(" " + strings.Repeat("-", width[i]-1) + ": |")
		} else {
			b.WriteString(" " + strings.Repeat("-", width[i]) + " |")
		}
	}
	b.WriteString("\n")
	for _, row := range cells[1:] {
		line(row)
	}
	return b.String()
}

func (t *table) right(i int) bool { return i < len(t.align) && t.align[i] == 'r' }

func escapeCell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}
