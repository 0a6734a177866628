package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
)

// TestTemporalServerPinIsTheCLIsServer: the Temporal server version
// deploy/dev/env.sh pins for `make run-cluster` (TEMPORAL_SERVER_VERSION) is
// the go.temporal.io/server the pinned Temporal CLI embeds, read from the
// built CLI (`go version -m bin/temporal`), so that the dev server and the
// cluster run the same engine. It skips when the CLI is not built.
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
	embedded := regexp.MustCompile(`(?m)^\s+dep\s+go\.temporal\.io/server\s+(v\S+)`).FindSubmatch(out)
	if embedded == nil {
		t.Fatalf("%s embeds no go.temporal.io/server:\n%s", cli, out)
	}
	pin := regexp.MustCompile(`export TEMPORAL_SERVER_VERSION="\$\{TEMPORAL_SERVER_VERSION:-(v[0-9.]+)\}"`).FindStringSubmatch(readFile(t, "dev/env.sh"))
	if pin == nil {
		t.Fatal("deploy/dev/env.sh pins no TEMPORAL_SERVER_VERSION")
	}
	if pin[1] != string(embedded[1]) {
		t.Errorf("deploy/dev/env.sh pins Temporal server %s, the CLI %s embeds %s", pin[1], cli, embedded[1])
	}
}
