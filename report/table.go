package report

import (
	"bytes"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Table is a plain-text table: a header and rows of cells, columns
// separated by two spaces. Columns whose cells are all numbers (or "-")
// are right-aligned, header included, so digits line up; other columns are
// left-aligned.
type Table struct {
	Header []string
	Rows   [][]string
}

// Add appends a row.
func (t *Table) Add(cells ...string) { t.Rows = append(t.Rows, cells) }

// WriteTo writes the table, one line per row, without trailing spaces.
func (t *Table) WriteTo(w io.Writer) (int64, error) {
	ncol := len(t.Header)
	for _, r := range t.Rows {
		ncol = max(ncol, len(r))
	}
	width := make([]int, ncol)
	numeric := make([]bool, ncol)
	for i := range numeric {
		numeric[i] = true
	}
	seen := make([]bool, ncol)
	measure := func(r []string, body bool) {
		for i, c := range r {
			width[i] = max(width[i], utf8.RuneCountInString(c))
			if body && c != "" {
				seen[i] = true
				if !isNumber(c) {
					numeric[i] = false
				}
			}
		}
	}
	measure(t.Header, false)
	for _, r := range t.Rows {
		measure(r, true)
	}
	var buf bytes.Buffer
	line := func(r []string) {
		var l strings.Builder
		for i := range ncol {
			c := ""
			if i < len(r) {
				c = r[i]
			}
			if i > 0 {
				l.WriteString("  ")
			}
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if numeric[i] && seen[i] {
				l.WriteString(pad + c)
			} else {
				l.WriteString(c + pad)
			}
		}
		buf.WriteString(strings.TrimRight(l.String(), " "))
		buf.WriteByte('\n')
	}
	if len(t.Header) > 0 {
		line(t.Header)
	}
	for _, r := range t.Rows {
		line(r)
	}
	return buf.WriteTo(w)
}

// String returns the table as WriteTo writes it.
func (t *Table) String() string {
	var b strings.Builder
	_, _ = t.WriteTo(&b)
	return b.String()
}

func isNumber(s string) bool {
	if s == "-" {
		return true
	}
	s = strings.TrimSuffix(strings.TrimSuffix(s, "%"), "×")
	_, err := strconv.ParseFloat(s, 64)
	return err == nil
}
