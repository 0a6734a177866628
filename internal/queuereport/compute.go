package queuereport

import (
	"math"
	"time"
)

// noTime stands for a nil time (no start, no end) in nanosecond fields.
const noTime = math.MinInt64

// nsOf returns t in nanoseconds since the Unix epoch, or noTime for nil.
func nsOf(t *time.Time) int64 {
	if t == nil {
		return noTime
	}
	return t.UnixNano()
}

// How a wait ended.
const (
	endStart  uint8 = iota // the job started (first run or a rerun)
	endCancel              // the job was cancelled while waiting
	endOther               // the job left the system otherwise (failed, rejected)
	endOpen                // still waiting: no end recorded
)

// waitRec is one continuous wait of a job, in nanoseconds since the Unix epoch.
type waitRec struct {
	a, b    int64 // start and end; b is noTime when how == endOpen
	job     int32
	requeue bool // a requeue wait (after a run) rather than the initial wait
	how     uint8
}

// jobRec is a job's fields as the computation uses them.
type jobRec struct {
	submit, firstStart, end int64 // noTime where nil
	group, pool, queue      int32
	mset                    int32 // allowed GPU models (modelSets ID)
	class                   int32 // (mset, demand) class; -1 when the job requests no GPU
	tier                    int8  // vocab.Tier, 0..3
	cancelled, cww          bool
}

// runRec is a run in nanoseconds; end is noTime while running.
type runRec struct {
	start, end int64
	job        int32
	milli      int32 // milli-GPU held (validated to fit)
}

// groupKey holds the interned value of each group-by dimension, -1 where the
// dimension is not grouped on. Indexes follow GroupKeys.
type groupKey [5]int32

// agg accumulates one group's metrics.
type agg struct {
	key groupKey

	jobs, submitted, cancelled       int
	initial, requeue                 []int64   // wait samples in ns
	initialLists, requeueLists       [][]int64 // the total's: every group's sorted samples
	longest                          int32     // index of the longest wait, -1 when none
	stillWaiting, overObjective      int
	waitsEnded, cancelledWhileWaited int
	gpu                              secAcc      // milli-GPU-seconds
	reasons                          []reasonAcc // per reason ID
	starving, overtaken, released    int
	tierStarved, stuck               int
}

// computer holds the state of one Compute call.
type computer struct {
	in        Input
	opts      Options
	from      int64 // Window.From
	end       int64 // min(Window.To, Now)
	grouped   [5]bool
	maxWait   []int64   // per queue ID, ns; 0 means no objective
	target    []float64 // per queue ID, normalised share; NaN where the queue has no target
	jobs      []jobRec
	jobIdx    map[string]int32 // built on the first record that is not next to its job's previous one
	order     []int32          // job indexes by submit time
	runs      []runRec
	runOff    []int32 // runs of job j are runOrder[runOff[j]:runOff[j+1]], by start
	runOrder  []int32
	waits     []waitRec // in job submit order, each job's waits together and in time order
	waitFirst []int32   // per job: index of its first wait in waits
	waitCount []int32   // per job: how many waits it has there
	bestWait  []int32   // per job: its longest wait overlapping the window, -1 when none
	poolGPU   []secAcc  // per pool: milli-GPU-seconds of runs in the window
	queueGPU  []secAcc  // per queue: the same
	// queuePoolGPU[q*len(pools)+p] is the same per queue and pool.
	queuePoolGPU []secAcc
	// poolReasons[p][rid] is pool p's time in reason rid clipped to the
	// window (the reason shares, ReasonShares); poolJobs[p] counts the
	// pool's jobs as Group.Jobs does.
	poolReasons [][]reasonAcc
	poolJobs    []int

	pools, queues, jobTypes, projects, reasons *interner
	msets                                      *modelSets
	classMset                                  []int32
	classDemand                                []int64
	classIdx                                   map[[2]int64]int32

	groupIdx map[groupKey]int32
	aggs     []agg
	lastSeen []int64 // per job: start of its latest wait event before the report end
	lastRsn  []int32 // per job: that event's reason ID, -1 when none
	// reasonByLen[l] is the ID of the only reason of length l seen so far, -1
	// when none, -2 when several.
	reasonByLen [32]int32

	sig                           []poolSignals // per pool: the starvation tables
	overtaken, releases, arrivals []int32       // starvation counts per wait
}

// Compute computes the queue service report of in over opts.Window. It returns
// an error naming the bad option or record: an invalid window or group-by key,
// a negative threshold, duplicate or unknown job IDs, runs that overlap or
// disagree with the job's FirstStart, intervals that end before they start.
func Compute(in Input, opts Options) (Report, error) {
	c, err := run(in, opts)
	if err != nil {
		return Report{}, err
	}
	r := c.report()
	setShares(&r, in.Targets, ShareBase{Capacity: in.Capacity, ProjectWeights: in.ProjectWeights})
	return r, nil
}
