package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
)

// Canonical returns the canonical JSON encoding of the resolved policy
// without its Simulation section: encoding/json's output of the struct
// (fields in declaration order, map keys sorted), with empty lists and maps
// written as absent (null) and protection-window times in UTC, so equal
// rules always encode alike. It is the body of the stored policy version.
func (p *Policy) Canonical() []byte {
	c := *p
	c.TierBase = nilIfEmpty(c.TierBase)
	c.FairShare.ProjectWeights = nilIfEmpty(c.FairShare.ProjectWeights)
	c.Pools = nilIfEmpty(c.Pools)
	c.Queues = nilSlice(c.Queues)
	c.Quotas = nilSlice(c.Quotas)
	c.Reclaim.Rules = nilSlice(c.Reclaim.Rules)
	c.Notifications.Webhooks = nilSlice(c.Notifications.Webhooks)
	c.ProtectionWindows = nil
	for _, w := range p.ProtectionWindows {
		w.Start, w.End, w.Queues = w.Start.UTC(), w.End.UTC(), nilSlice(w.Queues)
		c.ProtectionWindows = append(c.ProtectionWindows, w)
	}
	b, err := json.Marshal(&c)
	if err != nil {
		// Every field is a string, number, bool, time, or a map or slice of
		// them: encoding cannot fail (NaN is refused by Load).
		panic(fmt.Sprintf("policy: canonical JSON: %v", err))
	}
	return b
}

// Hash returns the policy version's identity: the lower-case hex SHA-256 of
// Canonical (64 digits).
func (p *Policy) Hash() string {
	sum := sha256.Sum256(p.Canonical())
	return hex.EncodeToString(sum[:])
}

func nilIfEmpty[M ~map[K]V, K comparable, V any](m M) M {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}

func nilSlice[S ~[]E, E any](s S) S {
	if len(s) == 0 {
		return nil
	}
	return s
}
