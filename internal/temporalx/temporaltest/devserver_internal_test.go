package temporaltest

import (
	"net"
	"testing"
)

// TestStartOnceOnATakenPortIsRecognised: a dev server started on a port
// another process holds fails, and its output is recognised as a lost port,
// the case Start retries on a new port (CI once failed on it).
func TestStartOnceOnATakenPortIsRecognised(t *testing.T) {
	SkipShort(t)
	bin, ok := Binary()
	if !ok {
		t.Skip("Temporal CLI not built (make temporal)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, out, c, _, err := startOnce(t, bin, l.Addr().(*net.TCPAddr).Port, freePort(t), "")
	if err == nil {
		c.Close()
		t.Fatal("a dev server started on a port another listener holds")
	}
	if !lostPort(out.String()) {
		t.Fatalf("the failure is not recognised as a lost port: %v\n%s", err, out.String())
	}
}
