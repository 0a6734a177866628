package experiment

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strconv"
	"text/tabwriter"

	"github.com/gpugov/gpugov/internal/queuereport"
)

// num renders a number for sentences and tables: whole from 100 up, two
// decimals from 1, three significant digits below 1, trailing zeros dropped
// ("5400", "12.5", "0.123", "0.000412").
func num(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	a := math.Abs(v)
	d := 0
	switch {
	case a >= 100 || a == 0:
	case a >= 1:
		d = 2
	default:
		d = 2 - int(math.Floor(math.Log10(a)))
	}
	p := math.Pow(10, float64(d))
	r := math.Round(v*p) / p
	if r == 0 {
		r = 0 // no "-0"
	}
	return strconv.FormatFloat(r, 'f', -1, 64)
}

// withUnit renders a value with its unit ("412 s", "3 jobs", "1 job", "0.25");
// "no value" for nil.
func withUnit(v *float64, unit string) string {
	if v == nil {
		return "no value"
	}
	switch n := num(*v); unit {
	case queuereport.UnitJobs:
		if n == "1" {
			return "1 job"
		}
		return n + " jobs"
	case queuereport.UnitSeconds, queuereport.UnitGPUSeconds:
		return n + " " + unit
	}
	return num(*v)
}

// percent renders a signed fraction as a percentage with one decimal
// ("−42.6 %", "+12.0 %"), the minus a true minus sign.
func percent(f float64) string {
	s := strconv.FormatFloat(math.Abs(f)*100, 'f', 1, 64)
	switch {
	case s == "0.0":
		return "0.0 %"
	case f < 0:
		return "−" + s + " %"
	}
	return "+" + s + " %"
}

// cell renders a table value: num, or "-" for nil.
func cell(v *float64) string {
	if v == nil {
		return "-"
	}
	return num(*v)
}

// unitCell renders a table value with its unit, or "-" for nil.
func unitCell(v *float64, unit string) string {
	if v == nil {
		return "-"
	}
	return withUnit(v, unit)
}

func (o *Outcome) writeText(out io.Writer) error {
	w := bufio.NewWriter(out)
	fmt.Fprintf(w, "verdict:  %s\n", o.Verdict)
	fmt.Fprintf(w, "reason:   %s\n", o.Reason)
	e := &o.Expected
	unit := unitOf(e.Metric)
	change := "no relative change"
	if e.Change != nil {
		change = percent(*e.Change)
	}
	met := "not met"
	if e.Met {
		met = "met"
	}
	fmt.Fprintf(w, "expected: %s %s, %s of at least %s %%: %s → %s (%s), sample %s → %s: %s\n",
		e.Target.label(), e.Metric, article(e.Direction), num(e.Expectation.Change*100),
		withUnit(e.Before, unit), withUnit(e.After, unit), change, jobs(e.SampleBefore), jobs(e.SampleAfter), met)
	if len(o.Breaches) > 0 {
		fmt.Fprintln(w, "\nbreaches:")
		for _, b := range o.Breaches {
			fmt.Fprintf(w, "  %s: %s\n", b.Condition.Name, b.Text)
		}
	}
	fmt.Fprintln(w, "\nchecks (full window):")
	if len(o.Checks) == 0 {
		fmt.Fprintln(w, "  no rollback condition")
	} else {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  CONDITION\tVALUE\tBASELINE\tTHRESHOLD\tBREACHED")
		for _, c := range o.Checks {
			breached := "no"
			if c.Breached {
				breached = "yes"
			}
			u := unitOf(c.Condition.Metric)
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", c.Condition.Name, unitCell(c.Value, u), unitCell(c.Baseline, u), unitCell(c.Threshold, u), breached)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(w, "\ncomparison (before: baseline, after: candidate):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  TARGET\tMETRIC\tUNIT\tBEFORE\tAFTER\tDELTA\tRATIO")
	for _, r := range o.Rows {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Target.label(), r.Metric, unitOf(r.Metric),
			cell(r.Before), cell(r.After), cell(r.Delta), cell(r.Ratio))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return w.Flush()
}

// FormatValue renders a metric value as the comparison table of
// Outcome.WriteText does ("766", "12.5", "0.0865"), "-" for nil, so that
// another summary of the same measurement prints the same numbers.
func FormatValue(v *float64) string { return cell(v) }
