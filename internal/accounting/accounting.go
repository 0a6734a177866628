// Package accounting holds the state-transition rules that the service's
// store and the simulator both apply, as pure functions, so that the
// simulator books a scheduling outcome exactly as the service does
// (docs/design.md, "one accounting"):
//
//   - admission against GPU capacity (Admit, CheckShapes, CheckCapacity): a
//     placement names each GPU once, each share is 1..1000 milli-GPU, and no
//     GPU is granted more than 1000 milli in all. The store checks every
//     placement with them before it writes the allocation (its gpu_usage
//     CHECK constraint stays the backstop); the simulator checks every grant.
//   - wait-event segmentation: WaitChanged (a new event when the reason
//     changes), WaitRefreshed (the open event takes a changed detail in
//     place, keeping its start) and NotYetEvaluatedSince (the closed
//     vocab.ReasonNotYetEvaluated event from submit or requeue to a job's
//     first evaluation). The store calls the two where it holds the rows
//     (store/cycle.go); the simulator calls WaitTransition, which combines
//     them for one job.
//   - effective run loss (EffectiveRunLoss): lost since checkpoint +
//     save/restore + recompute, per GPU held.
//
// Usage decay for fair share is the fourth shared rule; it lives in
// internal/scheduling (scheduling.DecayUsage and scheduling.AccrueUsage,
// Slurm's PriorityDecayHalfLife) because the planner's fair-share factor
// needs it and scheduling cannot import this package, which imports
// scheduling for its value types. The store, its snapshot and the simulator
// all decay usage through those two functions.
//
// The package imports only internal/scheduling, internal/vocab and the
// standard library.
package accounting
