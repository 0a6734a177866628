package scheduling

import (
	"fmt"
	"testing"
)

// BenchmarkPlan measures one scheduling cycle on 1,000 nodes × 8 GPUs of mixed
// models (NVLink domains of 4 or 8), about 90% allocated, with reasons and
// explanations for every waiting job.
func BenchmarkPlan(b *testing.B) {
	for _, pending := range []int{1000, 10000, 100000} {
		s := synthSnapshot(42, 1000, pending, 0.9)
		p := DefaultPolicy()
		b.Run(fmt.Sprintf("pending=%d", pending), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Plan(s, &p, t0)
			}
		})
	}
}

// BenchmarkPlanShares is BenchmarkPlan with queue service shares: the eight
// synthetic queues have a min_share of 0.05 each and every second one a
// max_share of 0.3, so Plan orders in two passes and checks caps.
func BenchmarkPlanShares(b *testing.B) {
	for _, pending := range []int{1000, 10000, 100000} {
		s := synthSnapshot(42, 1000, pending, 0.9)
		for i := range s.Queues {
			s.Queues[i].MinShare = 0.05
			if i%2 == 1 {
				s.Queues[i].MaxShare = 0.3
			}
		}
		p := DefaultPolicy()
		b.Run(fmt.Sprintf("pending=%d", pending), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Plan(s, &p, t0)
			}
		})
	}
}
