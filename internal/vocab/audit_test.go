package vocab

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestAuditActionsInDesign: every action of docs/design.md's audit table
// (| action | subject | actor | evidence |) is in AuditActions, and every
// one of AuditActions is named in the design, so neither lists one the other
// lacks.
func TestAuditActionsInDesign(t *testing.T) {
	raw, err := os.ReadFile("../../docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	start := strings.Index(doc, "| action | subject | actor | evidence |")
	if start < 0 {
		t.Fatal("docs/design.md has no audit table (| action | subject | actor | evidence |)")
	}
	name := regexp.MustCompile("`([a-z_]+)`")
	rows := 0
	for _, line := range strings.Split(doc[start:], "\n")[2:] {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			break
		}
		rows++
		for _, m := range name.FindAllStringSubmatch(strings.Split(line, "|")[1], -1) {
			if !slices.Contains(AuditActions, m[1]) {
				t.Errorf("design's audit table has %q, vocab.AuditActions lacks it", m[1])
			}
		}
	}
	if rows < 20 {
		t.Fatalf("read %d rows of the audit table", rows)
	}
	for _, a := range AuditActions {
		if !strings.Contains(doc, "`"+a+"`") {
			t.Errorf("vocab.AuditActions has %q, docs/design.md never names it", a)
		}
	}
}
