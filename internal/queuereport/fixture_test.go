package queuereport

import (
	"encoding/json"
	"os"
	"testing"
)

// fixtureFile is the shared hand-computed fixture (see doc.go, "Shared fixture").
// TestFixtureReport (external_test.go) checks Compute against its expectation;
// the store and the API check theirs against the same file (reporttest).
//
// Times below are seconds after T0 = 2026-01-05T00:00:00Z. Window [0, 36000),
// now 28800, so the report end is 28800. Targets: qa share 3 (0.75), max wait
// 3600; qb share 1 (0.25), max wait 600. Groups are queue × tier × job type ×
// pool: A = qa/standard/train/p1, C = qa/…/p2, B = qb/production/serve/p1,
// D = qb/…/p2.
//
//	J0 A  submit −7200, run [−7000, −3600), end −3600: ended before the window, not counted
//	J1 A  submit −3600, models {A100}, run [3600, 7200): initial wait 7200 (> 3600 objective)
//	J2 A  submit 0, runs [600, 4200) and [5400, open): wait 600, requeue wait 1200
//	J3 A  submit 300, 2 GPUs, never started: still waiting, 28800 − 300 = 28500
//	J4 A  submit 900, run [1800, 9000): wait 900
//	J5 B  submit 3000, 500 milli, run [3000, 6600): wait 0
//	J6 B  submit 3600, cancelled while waiting at 4800: wait 1200 (> 600 objective)
//	J7 B  submit 7200, run [7500, open): wait 300
//	J8 C  submit 0, run [0, open): wait 0
//	J9 D  submit 600, 2 GPUs, run [1200, 4800): wait 600 (= objective, not over)
//	J10 C submit 300, run [2400, 6000): wait 2100
//
// Group A: jobs J1–J4 = 4; submitted J2, J3, J4 = 3; samples [600, 900, 7200]
// → P50 = rank ⌈1.5⌉ = 2 → 900, P95 = P99 = max = 7200; requeue [1200]; longest
// J3 28500 ongoing; over objective J1, J3 = 2; waits ended 4 (J1, J2 ×2, J4),
// none cancelled → rate 0. GPU-s: J1 3600 + J2 3600 + 23400 + J4 7200 = 37800;
// pool p1 = 37800 + B's (J5 3600 × 0.5 = 1800, J7 21300) 23100 = 60900, so
// share 37800/60900, target 0.75. Reasons: capacity_busy J1 1800 (clipped from
// −3600) + J2 600 + J3 6900 + J4 900 = 10200; reserved 1800; quota 1200;
// fragmented J3 [7200, 28800) = 21600. Starvation of J3 in [301, 28800):
// overtaken by J4 (start 1800), J5 (3000), J7 (7500) = 3 — not by J2's rerun
// at 5400 (J2 was submitted before J3); releases 4200, 6600, 7200, 9000 in p1
// = 4; higher-tier arrivals J5, J6, J7 = 3. J1 (models {A100}) is not
// overtaken by the any-model jobs; J2's requeue wait [4200, 5400) does not
// count the release at 4200 (its own). Both waits pass the starvation floor
// max(qa's 3600 s objective, 300 s): J3's 28500 s and J1's 7200 s (which has
// one higher-tier arrival, J5, below the threshold of 3); J2's waits (600 s,
// 1200 s) are below it and carry no signal.
// Group B: jobs 3, submitted 3, cancelled 1 (J6); samples [0, 300] → P50 rank
// ⌈1.0⌉ = 1 → 0, P95 = 300; longest J6 1200; over objective J6 = 1; waits
// ended 3 (J5, J6, J7) with 1 cancelled → 1/3; GPU-s 23100 / 60900.
// Group C: samples [0, 2100]; longest J10 2100; GPU-s J8 28800 + J10 3600 =
// 32400 of p2's 32400 + J9 2 × 3600 = 39600. J10 is not overtaken by J9 (2 GPUs
// > 1).
// Group D: sample [600]; GPU-s 7200 / 39600; environment_not_ready 600.
// Total: 10 jobs, samples [0, 0, 300, 600, 600, 900, 2100, 7200] → P50 rank 4 →
// 600, P95 rank ⌈7.6⌉ = 8 → 7200; waits ended 10, cancelled 1 → 0.1; GPU-s 100500.
// Pool shares: p1 and p2 have 8 GPUs each and the observed window is 28800 s,
// 230400 GPU-s per pool: A 37800, C 32400, B 23100, D 7200 of it (0.1640625,
// 0.140625, 0.10026…, 0.03125); qa's min_share 0.25 and max_share 0.5 are
// reported on A and C.
// Reason shares (per pool, events clipped to [0, 28800), GPU-s = s × GPUs):
// p1 capacity_busy J1 1800 + J2 600 + J3 6900 + J4 900 + J7 300 = 10500 s,
// 1800 + 600 + 13800 + 900 + 300 = 17400 GPU-s; reserved 1800 s = 1800 GPU-s;
// quota 1200 = 1200; fragmented J3 21600 s × 2 = 43200 GPU-s; held J6 1200 =
// 1200. Pool p1 waited 36300 s, 64800 GPU-s: fragmentation and spec 43200 /
// 64800 = 66.7% is the main problem (capacity 17400 / 64800 = 26.9%). p2:
// environment_not_ready J9 600 s × 2 = 1200 GPU-s, 100% environment and
// operator. No not_yet_evaluated event: service latency 0 of each.
const fixtureFile = "testdata/fixture.json"

// fixture is the file's layout.
type fixture struct {
	Input    Input           `json:"input"`
	Options  Options         `json:"options"`
	Expected json.RawMessage `json:"expected"`
}

func loadFixture(t testing.TB) fixture {
	t.Helper()
	b, err := os.ReadFile(fixtureFile)
	if err != nil {
		t.Fatal(err)
	}
	var f fixture
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("decode %s: %v", fixtureFile, err)
	}
	return f
}
