package accounting

import (
	"fmt"

	"github.com/gpugov/gpugov/internal/scheduling"
)

// CheckShapes returns why the GPU shares of one placement are malformed, or
// "" when they are well formed: at least one share, no GPU named twice, and
// every share within 1..scheduling.MilliPerGPU milli-GPU (a whole GPU is
// granted once, at 1000; fractional shares are below it). The text is the
// one the store records as the conflict reason.
func CheckShapes(shares []scheduling.GPUShare) string {
	if len(shares) == 0 {
		return "placement names no GPU"
	}
	for i, s := range shares {
		for _, o := range shares[:i] {
			if o.UUID == s.UUID {
				return fmt.Sprintf("GPU %s listed twice", s.UUID)
			}
		}
		if s.Milli < 1 || s.Milli > scheduling.MilliPerGPU {
			return fmt.Sprintf("GPU %s share %d milli outside 1..%d", s.UUID, s.Milli, scheduling.MilliPerGPU)
		}
	}
	return ""
}

// CheckCapacity returns why share cannot be granted on a GPU that already has
// used milli-GPU granted, or "" when it fits: the GPU's grants must not pass
// scheduling.MilliPerGPU (docs/design.md, invariant 1).
func CheckCapacity(share scheduling.GPUShare, used int) string {
	if used+share.Milli > scheduling.MilliPerGPU {
		return fmt.Sprintf("GPU %s has %d milli granted; %d more would exceed %d", share.UUID, used, share.Milli,
			scheduling.MilliPerGPU)
	}
	return ""
}

// Admit applies CheckShapes and then CheckCapacity to every share, with
// used(uuid) the milli-GPU already granted on each GPU; it returns the first
// reason to refuse the placement, or "" to grant it. It changes nothing:
// callers charge a granted placement themselves (Ledger.Grant).
func Admit(shares []scheduling.GPUShare, used func(uuid string) int) string {
	if why := CheckShapes(shares); why != "" {
		return why
	}
	for _, s := range shares {
		if why := CheckCapacity(s, used(s.UUID)); why != "" {
			return why
		}
	}
	return ""
}

// Ledger is the milli-GPU granted per GPU UUID, as the store's gpu_usage
// table holds it. The zero value is not usable; make one with make(Ledger).
type Ledger map[string]int

// Used returns the milli-GPU granted on uuid (0 for a GPU without grants).
func (l Ledger) Used(uuid string) int { return l[uuid] }

// Admit is the package's Admit against the ledger's grants.
func (l Ledger) Admit(shares []scheduling.GPUShare) string { return Admit(shares, l.Used) }

// Grant charges shares to the ledger; call it only for admitted shares.
func (l Ledger) Grant(shares []scheduling.GPUShare) {
	for _, s := range shares {
		l[s.UUID] += s.Milli
	}
}

// Release returns shares to the ledger. It returns an error naming the GPU
// when a release would take a GPU below zero (shares not granted), after
// releasing nothing.
func (l Ledger) Release(shares []scheduling.GPUShare) error {
	for _, s := range shares {
		if l[s.UUID] < s.Milli {
			return fmt.Errorf("release of %d milli on GPU %s, which has %d granted", s.Milli, s.UUID, l[s.UUID])
		}
	}
	for _, s := range shares {
		if l[s.UUID] -= s.Milli; l[s.UUID] == 0 {
			delete(l, s.UUID)
		}
	}
	return nil
}
