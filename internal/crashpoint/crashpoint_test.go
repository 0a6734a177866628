package crashpoint

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestParse: a point names an activity and a moment; a malformed spec or a
// missing marker directory is an error naming the variable.
func TestParse(t *testing.T) {
	if p, err := Parse("", ""); p != nil || err != nil {
		t.Fatalf("empty spec: %v, %v; want no point", p, err)
	}
	p, err := Parse("FinishRun:after_effect", "/tmp/m")
	if err != nil || p.Activity != "FinishRun" || p.When != AfterEffect || p.Marker() != "/tmp/m/FinishRun.after_effect" {
		t.Fatalf("Parse = %+v, %v", p, err)
	}
	if p.String() != "FinishRun:after_effect" {
		t.Errorf("String = %q", p.String())
	}
	for _, bad := range []struct{ spec, dir, want string }{
		{"FinishRun", "/tmp", EnvPoint},
		{":before", "/tmp", EnvPoint},
		{"FinishRun:during", "/tmp", `moment "during"`},
		{"FinishRun:before", "", EnvDir},
	} {
		if _, err := Parse(bad.spec, bad.dir); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Parse(%q, %q) = %v, want an error naming %s", bad.spec, bad.dir, err, bad.want)
		}
	}
}

// TestFromEnvWorkflow: EnvWorkflow limits the point to a workflow-ID prefix.
func TestFromEnvWorkflow(t *testing.T) {
	t.Setenv(EnvPoint, "MarkRunning:before")
	t.Setenv(EnvDir, t.TempDir())
	t.Setenv(EnvWorkflow, "job-")
	p, err := FromEnv()
	if err != nil || p == nil || p.Workflow != "job-" || p.When != Before {
		t.Fatalf("FromEnv = %+v, %v", p, err)
	}
	if Interceptor(nil) != nil || Interceptor(p) == nil {
		t.Error("Interceptor: nil point must give nil, a point an interceptor")
	}
}

// TestFiredHere: a marker this process wrote holds a retry at the point; a
// marker of another process (or an unreadable one) lets it through.
func TestFiredHere(t *testing.T) {
	dir := t.TempDir()
	mine := filepath.Join(dir, "mine")
	other := filepath.Join(dir, "other")
	if err := os.WriteFile(mine, []byte(fmt.Sprintf("pid %d\nFinishRun:after_effect attempt 1 of workflow job/x\n", os.Getpid())), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(other, []byte(fmt.Sprintf("pid %d\nFinishRun:after_effect attempt 1 of workflow job/x\n", os.Getpid()+1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if !firedHere(mine) {
		t.Error("a marker of this process must hold the retry")
	}
	if firedHere(other) || firedHere(filepath.Join(dir, "missing")) {
		t.Error("a marker of another process (or none) must let the retry through")
	}
}
