package api

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"golang.org/x/time/rate"
)

// Limits bound what one request and one token may cost (docs/design.md §2
// "Request limits"). service.Config.APILimits carries them from `gpugov
// serve`'s flags; zero fields take the defaults below.
type Limits struct {
	// MaxBodyBytes bounds a request body, in bytes (http.MaxBytesReader on
	// every route); a larger one is 413 naming the limit. Default
	// DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// MaxHeaderBytes bounds a request's header lines (names and values, plus
	// the request target), in bytes; a larger one is 431 naming the limit.
	// serve also sets it as http.Server.MaxHeaderBytes, beyond which
	// (plus net/http's 4 KiB slack) net/http itself answers a plain 431.
	// Default DefaultMaxHeaderBytes.
	MaxHeaderBytes int
	// RatePerSecond is each token's sustained request rate (a token bucket,
	// golang.org/x/time/rate); over it a request is 429 with Retry-After.
	// Unknown tokens share one bucket of the same size. Default
	// DefaultRatePerSecond.
	RatePerSecond float64
	// RateBurst is the bucket's size, in requests. Default DefaultRateBurst.
	RateBurst int
}

// Defaults of Limits.
const (
	// DefaultMaxBodyBytes is MaxSpecBytes (1 MiB), the largest body any
	// handler decodes; the largest real one, a node's samples report of
	// MaxSamplesPerReport samples, is about 600 KiB.
	DefaultMaxBodyBytes = MaxSpecBytes
	// DefaultMaxHeaderBytes (64 KiB) leaves a bearer token, trace headers
	// and a long query string ample room; net/http's own default is 1 MiB.
	DefaultMaxHeaderBytes = 64 << 10
	// DefaultRatePerSecond: 200 requests/s per token. The heaviest caller,
	// `make run`'s replay, submits the trace's busiest day (732 pods) in
	// 144 s with one admin token, about 5/s on average; the load
	// test asks 50 submissions/s plus queries.
	DefaultRatePerSecond = 200
	// DefaultRateBurst: 1000 requests, more than the whole replay, so that a
	// burst of arrivals in one trace second is never refused.
	DefaultRateBurst = 1000
)

// withDefaults returns l with zero fields set to the defaults.
func (l Limits) withDefaults() Limits {
	if l.MaxBodyBytes <= 0 {
		l.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if l.RatePerSecond <= 0 {
		l.RatePerSecond = DefaultRatePerSecond
	}
	if l.RateBurst <= 0 {
		l.RateBurst = DefaultRateBurst
	}
	return l
}

// WithLimits sets the request and rate limits (zero fields: the defaults).
func WithLimits(l Limits) Option { return func(s *Server) { s.limits = l } }

// CodeTooLarge is the error code of 413 and 431 answers.
const CodeTooLarge = "too_large"

// CodeRateLimited is the error code of 429 answers.
const CodeRateLimited = "rate_limited"

// limitRequest enforces MaxHeaderBytes and MaxBodyBytes on every route: a
// header over the limit is 431 at once, a body over it 413 — at once when
// Content-Length says so, else when a handler reads past the limit
// (decodeStrict maps the *http.MaxBytesError).
func (s *Server) limitRequest(c *gin.Context) {
	if n := headerBytes(c.Request); n > s.limits.MaxHeaderBytes {
		writeError(c, newError(http.StatusRequestHeaderFieldsTooLarge, CodeTooLarge, "",
			"request headers are %d bytes; the limit is %d bytes", n, s.limits.MaxHeaderBytes))
		return
	}
	if c.Request.ContentLength > s.limits.MaxBodyBytes {
		writeError(c, bodyTooLarge(s.limits.MaxBodyBytes))
		return
	}
	if c.Request.Body != nil {
		c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, s.limits.MaxBodyBytes)
	}
	c.Next()
}

// bodyTooLarge is the 413 naming the body limit.
func bodyTooLarge(limit int64) *Error {
	return newError(http.StatusRequestEntityTooLarge, CodeTooLarge, "", "request body larger than the limit of %d bytes", limit)
}

// maxBytesError returns the 413 when err is http.MaxBytesReader's, else nil.
func maxBytesError(err error) *Error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return bodyTooLarge(mbe.Limit)
	}
	return nil
}

// headerBytes is what a request's header costs, as net/http counts it
// roughly: the request target and each "Name: value\r\n" line.
func headerBytes(r *http.Request) int {
	n := len(r.RequestURI)
	for name, vs := range r.Header {
		for _, v := range vs {
			n += len(name) + len(v) + 4
		}
	}
	return n
}

// unknownTokenKey is the rate-limit key every unknown token shares.
var unknownTokenKey = TokenDigest{}

// keyedLimiter holds one token bucket (golang.org/x/time/rate) per key, all
// of one rate and burst, and at most maxKeys of them: past that, keys whose
// bucket is full again are forgotten (a full bucket is what a new one would
// be, so forgetting it changes no answer), and if none is, a new key shares
// the overflow key's bucket. Both API limiters are one: per token digest
// (tokenLimiter) and per client address for unknown-token guesses
// (guessLimiter).
type keyedLimiter[K comparable] struct {
	every    rate.Limit
	burst    int
	maxKeys  int
	overflow K
	mu       sync.Mutex
	byKey    map[K]*rate.Limiter
	now      func() time.Time
}

func newKeyedLimiter[K comparable](l Limits, maxKeys int, overflow K, now func() time.Time) keyedLimiter[K] {
	return keyedLimiter[K]{every: rate.Limit(l.RatePerSecond), burst: l.RateBurst, maxKeys: maxKeys,
		overflow: overflow, byKey: map[K]*rate.Limiter{}, now: now}
}

// bucket returns key's bucket, creating it (bounded by maxKeys).
func (k *keyedLimiter[K]) bucket(key K) *rate.Limiter {
	k.mu.Lock()
	defer k.mu.Unlock()
	if lim, ok := k.byKey[key]; ok {
		return lim
	}
	if len(k.byKey) >= k.maxKeys {
		now := k.now()
		for key, lim := range k.byKey {
			if lim.TokensAt(now) >= float64(k.burst) {
				delete(k.byKey, key)
			}
		}
		if len(k.byKey) >= k.maxKeys {
			key = k.overflow
			if lim, ok := k.byKey[key]; ok {
				return lim
			}
		}
	}
	lim := rate.NewLimiter(k.every, k.burst)
	k.byKey[key] = lim
	return lim
}

// retryAfter is the whole seconds (at least 1) until a bucket holding tokens
// has one request again.
func (k *keyedLimiter[K]) retryAfter(tokens float64) int {
	if k.every <= 0 {
		return 1
	}
	return max(1, int(math.Ceil((1-tokens)/float64(k.every))))
}

// maxTokenKeys bounds the token digests tokenLimiter tracks. Valid tokens
// are few (one per person, agent and service), and every unknown token
// shares unknownTokenKey, so the bound is reached only by a token store of
// that many live tokens; past it they share the unknown tokens' bucket.
const maxTokenKeys = 100000

// tokenLimiter holds one token bucket per token digest (bounded by the
// number of valid tokens, plus the one of unknown tokens).
type tokenLimiter struct{ keyedLimiter[TokenDigest] }

func newTokenLimiter(l Limits, now func() time.Time) *tokenLimiter {
	return &tokenLimiter{newKeyedLimiter(l, maxTokenKeys, unknownTokenKey, now)}
}

// allow takes one request from key's bucket, or answers 429 with
// Retry-After (whole seconds until a request is allowed, at least 1) and
// returns false.
func (t *tokenLimiter) allow(c *gin.Context, key TokenDigest) bool {
	lim := t.bucket(key)
	now := t.now()
	if lim.AllowN(now, 1) {
		return true
	}
	secs := t.retryAfter(lim.TokensAt(now))
	tooManyRequests(c, secs, "more than %s requests/s (burst %d) with this token; retry after %d s", formatRate(float64(t.every)), t.burst, secs)
	return false
}

// tooManyRequests answers 429 rate_limited with Retry-After: secs (whole
// seconds, at least 1) and the message format, args.
func tooManyRequests(c *gin.Context, secs int, format string, args ...any) {
	c.Header("Retry-After", strconv.Itoa(secs))
	writeError(c, newError(http.StatusTooManyRequests, CodeRateLimited, "", format, args...))
}

// formatRate prints a rate without a needless fraction.
func formatRate(r float64) string { return strconv.FormatFloat(r, 'f', -1, 64) }

// maxGuessAddrs bounds the client addresses guessLimiter tracks; past it,
// addresses whose bucket is full again are forgotten, and if none is, the
// new address shares one overflow bucket.
const maxGuessAddrs = 10000

// overflowAddr is the bucket addresses share once maxGuessAddrs are tracked.
const overflowAddr = "*"

// guessLimiter holds one token bucket of unknown-token guesses per client
// address (the connection's remote IP, never X-Forwarded-For, which a
// guesser sets at will). authenticate checks it before it looks a token up
// in the store and charges it only when the token turned out unknown, so a
// flood of guesses from one address costs at most the burst in store
// queries and is then answered 429 without one, while valid tokens — from
// any address — are never charged.
type guessLimiter struct{ keyedLimiter[string] }

func newGuessLimiter(l Limits, now func() time.Time) *guessLimiter {
	return &guessLimiter{newKeyedLimiter(l, maxGuessAddrs, overflowAddr, now)}
}

// exhausted reports whether ip has no guess left; then it answers 429 with
// Retry-After (whole seconds until one is back, at least 1).
func (g *guessLimiter) exhausted(c *gin.Context, ip string) bool {
	tokens := g.bucket(ip).TokensAt(g.now())
	if tokens >= 1 {
		return false
	}
	secs := g.retryAfter(tokens)
	tooManyRequests(c, secs, "more than %s unknown-token requests/s (burst %d) from this address; retry after %d s", formatRate(float64(g.every)), g.burst, secs)
	return true
}

// charge takes one guess from ip's bucket.
func (g *guessLimiter) charge(ip string) { g.bucket(ip).AllowN(g.now(), 1) }
