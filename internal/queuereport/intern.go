package queuereport

import (
	"slices"
	"strings"
)

// interner maps strings to dense int32 IDs. The last lookup is remembered
// because records usually arrive clustered (events of one job, jobs of one queue).
type interner struct {
	ids    map[string]int32
	names  []string
	last   string
	lastID int32
}

func newInterner() *interner {
	return &interner{ids: make(map[string]int32), lastID: -1}
}

func (in *interner) id(s string) int32 {
	if in.lastID >= 0 && s == in.last {
		return in.lastID
	}
	id, ok := in.ids[s]
	if !ok {
		id = int32(len(in.names))
		in.ids[s] = id
		in.names = append(in.names, s)
	}
	in.last, in.lastID = s, id
	return id
}

// modelSets interns sets of GPU models. ID 0 is the empty set, meaning "any
// model" for a request and "unknown model" for a release.
type modelSets struct {
	in   *interner
	sets [][]string // sorted, deduplicated models of each ID
}

func newModelSets() *modelSets {
	ms := &modelSets{in: newInterner(), sets: [][]string{nil}}
	ms.in.id("") // ID 0: the empty set
	return ms
}

// id returns the ID of the set of models; the order and repetition of models do
// not matter.
func (ms *modelSets) id(models []string) int32 {
	switch len(models) {
	case 0:
		return 0
	case 1:
		if models[0] == "" {
			return 0
		}
		return ms.add(models[0], models)
	}
	norm := slices.Clone(models)
	slices.Sort(norm)
	norm = slices.Compact(norm)
	if len(norm) > 0 && norm[0] == "" {
		norm = norm[1:]
	}
	return ms.add(strings.Join(norm, "\x00"), norm)
}

func (ms *modelSets) add(key string, norm []string) int32 {
	id := ms.in.id(key)
	if int(id) == len(ms.sets) {
		ms.sets = append(ms.sets, slices.Clone(norm))
	}
	return id
}

// subset reports whether every GPU model allowed by set a is allowed by set b
// (a job limited to a runs only on GPUs a job limited to b accepts).
func (ms *modelSets) subset(a, b int32) bool {
	if b == 0 {
		return true // b accepts any model
	}
	if a == 0 {
		return false // a may run on models b does not accept
	}
	for _, m := range ms.sets[a] {
		if _, ok := slices.BinarySearch(ms.sets[b], m); !ok {
			return false
		}
	}
	return true
}

// intersects reports whether a release of models rel can serve a job that
// accepts models job.
func (ms *modelSets) intersects(rel, job int32) bool {
	if rel == 0 || job == 0 {
		return true
	}
	for _, m := range ms.sets[rel] {
		if _, ok := slices.BinarySearch(ms.sets[job], m); ok {
			return true
		}
	}
	return false
}
