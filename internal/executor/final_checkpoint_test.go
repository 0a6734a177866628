package executor

import (
	"context"
	"testing"
	"time"

	"go.temporal.io/sdk/worker"

	"github.com/gpugov/gpugov/internal/vocab"
)

// TestCancelledRunSavesTheStepReached: a checkpointable job cancelled
// part-way (a preemption notice) writes a checkpoint of the step it reached
// on its way out; with SkipFinalCheckpoint it keeps only its interval ones.
func TestCancelledRunSavesTheStepReached(t *testing.T) {
	for _, skip := range []bool{false, true} {
		log := &checkpointLog{}
		e := fastExecutor(log)
		e.SkipFinalCheckpoint = skip
		ctx, cancel := context.WithCancel(context.Background())
		env := newRunEnv(t, e, worker.Options{BackgroundActivityContext: ctx})
		time.AfterFunc(120*time.Millisecond, cancel)
		res, err := env.run(t, &RunInput{JobID: "j", RunID: "r", RunSeconds: 60_000, CheckpointIntervalSeconds: 50})
		if err != nil {
			t.Fatal(err)
		}
		steps := log.Steps()
		last := steps[len(steps)-1]
		switch {
		case res.Outcome != vocab.RunCancelled || res.LastCheckpoint == nil:
			t.Fatalf("skip=%v: result %+v, want cancelled with a checkpoint", skip, res)
		case !skip && (last != res.Step || res.LastCheckpoint.Step != res.Step):
			t.Fatalf("checkpoints %v, result %+v: want the last at the step reached", steps, res)
		case skip && last%50 != 0:
			t.Fatalf("skip: checkpoints %v, want interval ones only", steps)
		}
	}
}
