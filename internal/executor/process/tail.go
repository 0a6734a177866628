package process

import (
	"sync"
	"unicode/utf8"
)

// tailBuffer keeps the last size bytes written to it (a ring buffer), so a
// job's output costs bounded memory however much it prints.
type tailBuffer struct {
	mu    sync.Mutex
	buf   []byte // ring storage, len == size
	next  int    // where the next byte goes
	full  bool   // the ring has wrapped
	total int64  // bytes written in all
}

// newTailBuffer returns a buffer keeping the last size bytes; size > 0.
func newTailBuffer(size int) *tailBuffer {
	return &tailBuffer{buf: make([]byte, size)}
}

// Write keeps the end of p; it never fails.
func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(p)
	b.total += int64(n)
	if len(p) >= len(b.buf) {
		copy(b.buf, p[len(p)-len(b.buf):])
		b.next, b.full = 0, true
		return n, nil
	}
	c := copy(b.buf[b.next:], p)
	if c < len(p) {
		copy(b.buf, p[c:])
		b.full = true
	}
	b.next = (b.next + len(p)) % len(b.buf)
	if b.next == 0 && len(p) > 0 {
		b.full = true
	}
	return n, nil
}

// String returns the kept bytes, oldest first. When the ring has wrapped,
// leading bytes of a UTF-8 character cut in two are dropped.
func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.full {
		return string(b.buf[:b.next])
	}
	out := make([]byte, 0, len(b.buf))
	out = append(append(out, b.buf[b.next:]...), b.buf[:b.next]...)
	for i := 0; i < utf8.UTFMax-1 && len(out) > 0 && !utf8.RuneStart(out[0]); i++ {
		out = out[1:]
	}
	return string(out)
}

// Total is the number of bytes written in all.
func (b *tailBuffer) Total() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}
