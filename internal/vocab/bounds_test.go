package vocab

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// boundsRow renders b as its row of docs/design.md's bounds table.
func boundsRow(b Bound) string {
	num := func(v float64) string {
		if v == float64(int64(v)) {
			return strconv.FormatInt(int64(v), 10)
		}
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	lo := num(b.Min)
	if b.MinExclusive {
		lo = "> " + lo + ", ≤"
	} else {
		lo += ".."
	}
	return fmt.Sprintf("| %s | `%s` | %s%s | %s | %s |", b.Input, b.Field, lo, num(b.Max), b.Unit, b.Why)
}

// TestBoundsTableInDesign holds docs/design.md's bounds table to Bounds:
// every bound has its row, and the table has no other rows.
func TestBoundsTableInDesign(t *testing.T) {
	doc, err := os.ReadFile("../../docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	start := strings.Index(text, "| input | field | range | unit | why |")
	if start < 0 {
		t.Fatal("docs/design.md has no bounds table (| input | field | range | unit | why |)")
	}
	var rows []string
	for _, line := range strings.Split(text[start:], "\n")[2:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		rows = append(rows, line)
	}
	var want []string
	for _, b := range Bounds {
		want = append(want, boundsRow(b))
	}
	if strings.Join(rows, "\n") != strings.Join(want, "\n") {
		t.Errorf("docs/design.md's bounds table differs from vocab.Bounds; want:\n%s", strings.Join(want, "\n"))
	}
	for _, b := range Bounds {
		if !(b.Min <= b.Max) || b.Field == "" || b.Unit == "" || b.Why == "" {
			t.Errorf("bound %+v: want Min ≤ Max and a field, unit and reason", b)
		}
	}
}
