package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
)

// TestTemporalServerPinIsTheCLIsServer: the Temporal server and UI versions
// deploy/dev/env.sh pins for `make run-cluster` (TEMPORAL_SERVER_VERSION,
// TEMPORAL_UI_VERSION) are the go.temporal.io/server and
// github.com/temporalio/ui-server/v2 the pinned Temporal CLI embeds, read
// from the built CLI (`go version -m bin/temporal`), so that the dev server
// and the cluster run the same engine and UI. It skips when the CLI is not
// built.
func TestTemporalServerPinIsTheCLIsServer(t *testing.T) {
	cli := filepath.Join("..", "bin", "temporal")
	if p := os.Getenv("TEMPORAL_BIN"); p != "" {
		cli = p
	}
	if _, err := os.Stat(cli); err != nil {
		t.Skipf("Temporal CLI not built (%s): make temporal", cli)
	}
	out, err := exec.Command("go", "version", "-m", cli).CombinedOutput()
	if err != nil {
		t.Fatalf("go version -m %s: %v\n%s", cli, err, out)
	}
	env := readFile(t, "dev/env.sh")
	for _, c := range []struct{ module, pinVar string }{
		{"go.temporal.io/server", "TEMPORAL_SERVER_VERSION"},
		{"github.com/temporalio/ui-server/v2", "TEMPORAL_UI_VERSION"},
	} {
		embedded := regexp.MustCompile(`(?m)^\s+dep\s+` + regexp.QuoteMeta(c.module) + `\s+(v\S+)`).FindSubmatch(out)
		if embedded == nil {
			t.Errorf("%s embeds no %s", cli, c.module)
			continue
		}
		pin := regexp.MustCompile(`export ` + c.pinVar + `="\$\{` + c.pinVar + `:-(v[0-9.]+)\}"`).FindStringSubmatch(env)
		if pin == nil {
			t.Errorf("deploy/dev/env.sh pins no %s", c.pinVar)
		} else if pin[1] != string(embedded[1]) {
			t.Errorf("deploy/dev/env.sh pins %s %s, the CLI %s embeds %s %s", c.pinVar, pin[1], cli, c.module, embedded[1])
		}
	}
}
