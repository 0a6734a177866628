package vocab

import "fmt"

// Tier is a queue's service tier. Tiers are ordered: a larger value is served
// first. The set is fixed by docs/design.md §1.
type Tier int

// The four tiers, lowest first.
const (
	TierExperiment Tier = iota // best effort, reclaimable (Alibaba QoS BE)
	TierStandard               // normal training (Alibaba QoS Burstable)
	TierKeyProject             // delivery window (Alibaba QoS Guaranteed)
	TierProduction             // online inference, protected (Alibaba QoS LS)
)

// Tiers lists every tier from highest to lowest.
var Tiers = []Tier{TierProduction, TierKeyProject, TierStandard, TierExperiment}

// String returns the tier's stable name: production, key-project, standard or
// experiment; tier(n) for a value outside the set.
func (t Tier) String() string {
	switch t {
	case TierExperiment:
		return "experiment"
	case TierStandard:
		return "standard"
	case TierKeyProject:
		return "key-project"
	case TierProduction:
		return "production"
	}
	return fmt.Sprintf("tier(%d)", int(t))
}

// ParseTier maps a tier name to a Tier. It returns an error naming the
// accepted values for anything else.
func ParseTier(s string) (Tier, error) {
	for _, t := range Tiers {
		if t.String() == s {
			return t, nil
		}
	}
	return 0, fmt.Errorf("unknown tier %q (want production, key-project, standard or experiment)", s)
}
