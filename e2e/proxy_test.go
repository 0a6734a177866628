package e2e

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// tcpProxy forwards TCP connections from a local port to a target, and can
// cut them: Down closes every forwarded connection and makes new ones close
// at once (as a database that went away), Up forwards again. With several
// targets (startBalancer) it is a load balancer in front of serve
// replicas: each new connection goes to the next target in turn, or to the
// one after when that one refuses (a replica that was killed).
type tcpProxy struct {
	target  string   // the first target
	targets []string // every target, in turn
	l       net.Listener

	mu    sync.Mutex
	down  bool
	next  int // the target of the next connection
	conns map[net.Conn]bool
}

// startProxy listens on a free local port, forwarding to target; it stops
// when the test ends.
func startProxy(t testing.TB, target string) *tcpProxy { return startBalancer(t, target) }

// startBalancer listens on a free local port, forwarding each connection
// to the targets in turn, skipping those that refuse; it stops when the
// test ends.
func startBalancer(t testing.TB, targets ...string) *tcpProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{target: targets[0], targets: targets, l: l, conns: map[net.Conn]bool{}}
	go p.acceptLoop()
	t.Cleanup(func() {
		_ = l.Close()
		p.Down()
	})
	return p
}

// Addr is the proxy's host:port.
func (p *tcpProxy) Addr() string { return p.l.Addr().String() }

func (p *tcpProxy) acceptLoop() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		go p.forward(c)
	}
}

// forward pipes c to a new connection to the next target that accepts one
// (in turn), unless the proxy is down.
func (p *tcpProxy) forward(c net.Conn) {
	p.mu.Lock()
	if p.down {
		p.mu.Unlock()
		_ = c.Close()
		return
	}
	first := p.next
	p.next = (p.next + 1) % len(p.targets)
	p.mu.Unlock()
	var up net.Conn
	var err error
	for i := range p.targets {
		if up, err = net.DialTimeout("tcp", p.targets[(first+i)%len(p.targets)], 2*time.Second); err == nil {
			break
		}
	}
	if err != nil {
		_ = c.Close()
		return
	}
	if !p.track(c, up) {
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		_ = dst.Close()
		_ = src.Close()
	}
	go pipe(up, c)
	go pipe(c, up)
	wg.Wait()
	p.untrack(c, up)
}

// track registers a forwarded pair, or closes it when the proxy went down meanwhile.
func (p *tcpProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		for _, c := range cs {
			_ = c.Close()
		}
		return false
	}
	for _, c := range cs {
		p.conns[c] = true
	}
	return true
}

func (p *tcpProxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
	}
}

// Down closes every forwarded connection and refuses new ones.
func (p *tcpProxy) Down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

// Up forwards new connections again.
func (p *tcpProxy) Up() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
}

// upstreamPorts are the local ports of the proxy's open connections to the
// target: the client_port PostgreSQL's pg_stat_activity shows for them.
func (p *tcpProxy) upstreamPorts() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ports []int
	for c := range p.conns {
		if c.RemoteAddr().String() == p.target {
			ports = append(ports, c.LocalAddr().(*net.TCPAddr).Port)
		}
	}
	return ports
}
