package process

import (
	"math/rand/v2"
	"testing"
)

func TestTailBufferKeepsTheLastBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{1, 7, 64} {
		b := newTailBuffer(size)
		var all []byte
		for range 200 {
			chunk := make([]byte, rng.IntN(2*size+2))
			for i := range chunk {
				chunk[i] = 'a' + byte(rng.IntN(26))
			}
			if n, err := b.Write(chunk); n != len(chunk) || err != nil {
				t.Fatalf("Write = %d, %v", n, err)
			}
			all = append(all, chunk...)
			want := all[max(0, len(all)-size):]
			if got := b.String(); got != string(want) {
				t.Fatalf("size %d after %d bytes: %q, want %q", size, len(all), got, want)
			}
		}
		if b.Total() != int64(len(all)) {
			t.Errorf("total = %d, want %d", b.Total(), len(all))
		}
	}
}

func TestTailBufferDropsACutCharacter(t *testing.T) {
	b := newTailBuffer(5)
	_, _ = b.Write([]byte("a€cde")) // € is 3 bytes; the last 5 bytes start inside it
	if got := b.String(); got != "cde" {
		t.Errorf("String = %q, want %q", got, "cde")
	}
	_, _ = b.Write([]byte("x"))
	if got := b.String(); got != "cdex" {
		t.Errorf("String = %q, want %q", got, "cdex")
	}
}
