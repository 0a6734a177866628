// Package webhook signs and verifies gpugov's webhook deliveries
// (docs/design.md §3, notifications). The scheme follows Stripe's signed
// material — the timestamp, a dot and the raw body, so that a captured
// request cannot be replayed later under a new timestamp — with GitHub's
// header form (`sha256=<hex>` of an HMAC-SHA256):
//
//	X-Gpugov-Event-Id:  n-01J…            (the notification's ID; the same on every retry)
//	X-Gpugov-Event:     job.placed        (the notification kind)
//	X-Gpugov-Timestamp: 1767225600        (Unix seconds of this attempt)
//	X-Gpugov-Signature: sha256=<hex HMAC-SHA256(secret, timestamp + "." + body)>
//
// A receiver recomputes the HMAC over the raw body bytes, compares it in
// constant time, refuses a timestamp outside its tolerance (Verify's), and
// deduplicates by event ID (a retry after a lost answer repeats it).
//
// The package is pure: it imports only the standard library.
package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Header names of a delivery.
const (
	HeaderEventID   = "X-Gpugov-Event-Id"
	HeaderEvent     = "X-Gpugov-Event"
	HeaderTimestamp = "X-Gpugov-Timestamp"
	HeaderSignature = "X-Gpugov-Signature"
)

// signaturePrefix is the scheme of HeaderSignature's value.
const signaturePrefix = "sha256="

// DefaultTolerance is the replay window Verify applies when given 0.
const DefaultTolerance = 5 * time.Minute

// Sign returns the HeaderSignature value for body sent at timestamp (Unix
// seconds): "sha256=" and the lower-case hex HMAC-SHA256 under secret of
// the timestamp's decimal digits, ".", and body.
func Sign(secret []byte, timestamp int64, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(strconv.FormatInt(timestamp, 10)))
	m.Write([]byte{'.'})
	m.Write(body)
	return signaturePrefix + hex.EncodeToString(m.Sum(nil))
}

// SetHeaders sets the four delivery headers (and Content-Type
// application/json) on h for the event id of kind, signed at now.
func SetHeaders(h http.Header, secret []byte, id, kind string, body []byte, now time.Time) {
	ts := now.Unix()
	h.Set("Content-Type", "application/json")
	h.Set(HeaderEventID, id)
	h.Set(HeaderEvent, kind)
	h.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	h.Set(HeaderSignature, Sign(secret, ts, body))
}

// Errors of Verify.
var (
	ErrMissingHeader = errors.New("webhook: missing signature or timestamp header")
	ErrBadSignature  = errors.New("webhook: signature does not match")
	ErrStale         = errors.New("webhook: timestamp outside the tolerance")
)

// Verify checks a received delivery: h's signature must be Sign(secret,
// timestamp, body) and the timestamp within tolerance of now (0 means
// DefaultTolerance). It returns nil, or an error wrapping ErrMissingHeader,
// ErrBadSignature or ErrStale.
func Verify(secret []byte, h http.Header, body []byte, tolerance time.Duration, now time.Time) error {
	sig, tsText := h.Get(HeaderSignature), h.Get(HeaderTimestamp)
	if sig == "" || tsText == "" {
		return ErrMissingHeader
	}
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: timestamp %q is not Unix seconds", ErrBadSignature, tsText)
	}
	if !strings.HasPrefix(sig, signaturePrefix) {
		return fmt.Errorf("%w: want %s<hex>", ErrBadSignature, signaturePrefix)
	}
	if !hmac.Equal([]byte(sig), []byte(Sign(secret, ts, body))) {
		return ErrBadSignature
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	if d := now.Sub(time.Unix(ts, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: %s off, tolerance %s", ErrStale, d.Round(time.Second), tolerance)
	}
	return nil
}
