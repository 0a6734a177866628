package simulation

import (
	"hash/fnv"
	"math/rand/v2"
	"slices"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

// drawRecovery applies cfg.Recovery to one job: a job of a listed tier is
// checkpointable when the first draw of PCG(cfg.Seed, FNV-64a(id)) is below
// Probability. Seeding by job ID makes each job's evidence independent of
// the order and number of the others.
func drawRecovery(cfg Config, id string, tier vocab.Tier) scheduling.RecoveryEvidence {
	r := cfg.Recovery
	if !slices.Contains(r.Tiers, tier) {
		return scheduling.RecoveryEvidence{}
	}
	h := fnv.New64a()
	h.Write([]byte(id))
	if rand.New(rand.NewPCG(cfg.Seed, h.Sum64())).Float64() >= r.Probability {
		return scheduling.RecoveryEvidence{}
	}
	// The trace carries no recovery profile either: each job stands for its
	// own, whose record is the rule's verified resumes and no failure
	// (RecoveryRule), the fields the preemption gate reads.
	return scheduling.RecoveryEvidence{
		Checkpointable:            true,
		CheckpointIntervalSeconds: r.CheckpointIntervalSeconds,
		VerifiedResumes:           r.VerifiedResumes,
		Profile:                   "simulated/" + id,
		ProfileVerifiedResumes:    r.VerifiedResumes,
	}
}
