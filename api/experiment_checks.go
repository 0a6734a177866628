package api

import (
	"time"

	"github.com/gpugov/gpugov/internal/experiment"
)

// pastStart is the FieldError on start when the spec's start is earlier
// than now less one scheduling cycle (the slack for a client's clock and
// the request's way): the workflow would measure a baseline and switch at
// once while the spec says otherwise. No start (start now) is fine.
func pastStart(spec *experiment.Spec, now time.Time, cycle time.Duration) []experiment.FieldError {
	if spec.Start == nil || !spec.Start.Before(now.Add(-cycle)) {
		return nil
	}
	return []experiment.FieldError{{Field: "start", Message: spec.Start.UTC().Format(time.RFC3339) +
		" is in the past (now " + now.UTC().Format(time.RFC3339) + "); omit it to start now"}}
}
