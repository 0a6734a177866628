package load

import (
	"math"
	"slices"
	"sync"
	"time"
)

// Kind is one request kind of the load mix.
type Kind string

// The request kinds, in report order.
const (
	KindSubmit Kind = "submit" // POST /v1/jobs
	KindGet    Kind = "get"    // GET /v1/jobs/{id} of an accepted job
	KindWhy    Kind = "why"    // GET /v1/jobs/{id}/events: wait events and the why record
	KindList   Kind = "list"   // GET /v1/jobs?state=waiting&limit=100
	KindReport Kind = "report" // GET /v1/reports/queues over the last hour
	KindCancel Kind = "cancel" // POST /v1/jobs/{id}/cancel of an accepted job
)

// Kinds lists every kind in report order.
var Kinds = []Kind{KindSubmit, KindGet, KindWhy, KindList, KindReport, KindCancel}

// KindStats is what one kind's requests got.
type KindStats struct {
	Kind Kind `json:"kind"`
	// Scheduled is how many requests the open-loop schedule called for;
	// Sent of them went out (the rest were dropped at Config.MaxInFlight or
	// had no target yet, see Dropped and NoTarget).
	Scheduled int `json:"scheduled"`
	Sent      int `json:"sent"`
	Dropped   int `json:"dropped_in_flight_cap"`
	NoTarget  int `json:"no_target"`
	// OK counts 2xx answers; Conflict 409s (a cancel of a job that had
	// already ended: expected); TooMany 429s; ClientErr other 4xx; ServerErr
	// 5xx; NoAnswer transport failures and timeouts.
	OK        int `json:"ok"`
	Conflict  int `json:"conflict_409"`
	TooMany   int `json:"too_many_429"`
	ClientErr int `json:"client_error_4xx"`
	ServerErr int `json:"server_error_5xx"`
	NoAnswer  int `json:"no_answer"`
	// RatePerSec is Sent over the load window, per second.
	RatePerSec float64 `json:"rate_per_s"`
	// P50, P99 and Max are latencies of the answered requests, measured from
	// the time the open-loop schedule meant to send each (so the wait for a
	// free connection or a late generator is included); in milliseconds.
	P50ms float64 `json:"p50_ms"`
	P99ms float64 `json:"p99_ms"`
	Maxms float64 `json:"max_ms"`
	// LateP99ms is the 99th percentile of how late the generator sent a
	// request after its scheduled time, in milliseconds: large values mean
	// the load machine, not serve, fell behind.
	LateP99ms float64 `json:"late_p99_ms"`
	// Errors holds up to five distinct error messages seen.
	Errors []string `json:"errors,omitempty"`
}

// recorder collects outcomes per kind; safe for concurrent use.
type recorder struct {
	mu    sync.Mutex
	stats map[Kind]*KindStats
	lat   map[Kind][]time.Duration
	late  map[Kind][]time.Duration
}

func newRecorder() *recorder {
	r := &recorder{stats: map[Kind]*KindStats{}, lat: map[Kind][]time.Duration{}, late: map[Kind][]time.Duration{}}
	for _, k := range Kinds {
		r.stats[k] = &KindStats{Kind: k}
	}
	return r
}

// scheduled counts one request the schedule called for; outcome is "" when it
// is sent, else "dropped" or "no_target".
func (r *recorder) scheduled(k Kind, outcome string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats[k]
	s.Scheduled++
	switch outcome {
	case "dropped":
		s.Dropped++
	case "no_target":
		s.NoTarget++
	default:
		s.Sent++
	}
}

// answered records one sent request: its HTTP status (0 for no answer), its
// latency from the scheduled time, how late it was sent, and its error.
func (r *recorder) answered(k Kind, status int, latency, late time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats[k]
	switch {
	case status == 0:
		s.NoAnswer++
	case status >= 200 && status < 300:
		s.OK++
	case status == 409:
		s.Conflict++
	case status == 429:
		s.TooMany++
	case status >= 500:
		s.ServerErr++
	default:
		s.ClientErr++
	}
	if status != 0 {
		r.lat[k] = append(r.lat[k], latency)
	}
	r.late[k] = append(r.late[k], late)
	if err != nil && status != 409 && len(s.Errors) < 5 {
		msg := err.Error()
		if !slices.Contains(s.Errors, msg) {
			s.Errors = append(s.Errors, msg)
		}
	}
}

// snapshot returns the stats of every kind with percentiles, rates over window.
func (r *recorder) snapshot(window time.Duration) []KindStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]KindStats, 0, len(Kinds))
	for _, k := range Kinds {
		s := *r.stats[k]
		s.Errors = slices.Clone(s.Errors)
		if window > 0 {
			s.RatePerSec = float64(s.Sent) / window.Seconds()
		}
		lat := slices.Clone(r.lat[k])
		slices.Sort(lat)
		s.P50ms, s.P99ms = ms(percentile(lat, 0.50)), ms(percentile(lat, 0.99))
		if n := len(lat); n > 0 {
			s.Maxms = ms(lat[n-1])
		}
		late := slices.Clone(r.late[k])
		slices.Sort(late)
		s.LateP99ms = ms(percentile(late, 0.99))
		out = append(out, s)
	}
	return out
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// percentile is the nearest-rank q-quantile of sorted (0 when empty): the
// smallest value with at least q of the values at or below it.
func percentile(sorted []time.Duration, q float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	i := int(math.Ceil(float64(n)*q)) - 1
	return sorted[max(0, min(n-1, i))]
}

// median is the median of v (0 when empty); v is sorted in place.
func median(v []float64) float64 {
	n := len(v)
	if n == 0 {
		return 0
	}
	slices.Sort(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}
