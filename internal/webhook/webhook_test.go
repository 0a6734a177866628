package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"testing"
	"time"
)

// TestSignMatchesTheDocumentedRecipe recomputes the signature as the README
// tells a receiver to: HMAC-SHA256 over "<timestamp>.<body>", hex.
func TestSignMatchesTheDocumentedRecipe(t *testing.T) {
	secret, body := []byte("s3cret"), []byte(`{"id":"n-1"}`)
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("1767225600." + string(body)))
	want := "sha256=" + hex.EncodeToString(m.Sum(nil))
	if got := Sign(secret, 1767225600, body); got != want {
		t.Fatalf("Sign = %s, want %s", got, want)
	}
}

func TestVerify(t *testing.T) {
	secret, body := []byte("s3cret"), []byte(`{"id":"n-1","type":"job.placed"}`)
	now := time.Unix(1767225600, 0)
	h := http.Header{}
	SetHeaders(h, secret, "n-1", "job.placed", body, now)
	if h.Get(HeaderEventID) != "n-1" || h.Get(HeaderEvent) != "job.placed" || h.Get("Content-Type") != "application/json" {
		t.Fatalf("headers = %v", h)
	}
	if err := Verify(secret, h, body, 0, now.Add(time.Minute)); err != nil {
		t.Fatalf("Verify of a fresh delivery: %v", err)
	}
	cases := []struct {
		name   string
		secret []byte
		body   []byte
		h      http.Header
		at     time.Time
		want   error
	}{
		{"other secret", []byte("other"), body, h, now, ErrBadSignature},
		{"changed body", secret, []byte(`{"id":"n-2","type":"job.placed"}`), h, now, ErrBadSignature},
		{"replayed later", secret, body, h, now.Add(6 * time.Minute), ErrStale},
		{"from the future", secret, body, h, now.Add(-6 * time.Minute), ErrStale},
		{"no headers", secret, body, http.Header{}, now, ErrMissingHeader},
	}
	for _, tc := range cases {
		if err := Verify(tc.secret, tc.h, tc.body, 0, tc.at); !errors.Is(err, tc.want) {
			t.Errorf("%s: Verify = %v, want %v", tc.name, err, tc.want)
		}
	}
	// A timestamp moved forward without re-signing fails: it is signed material.
	moved := h.Clone()
	moved.Set(HeaderTimestamp, "1767225900")
	if err := Verify(secret, moved, body, 0, time.Unix(1767225900, 0)); !errors.Is(err, ErrBadSignature) {
		t.Errorf("re-timestamped replay: Verify = %v, want ErrBadSignature", err)
	}
}
