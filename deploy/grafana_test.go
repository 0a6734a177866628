package deploy_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/gpugov/gpugov/internal/telemetry"
)

// grafanaDashboard is the part of a Grafana dashboard JSON model the tests read.
type grafanaDashboard struct {
	UID    string         `json:"uid"`
	Title  string         `json:"title"`
	Panels []grafanaPanel `json:"panels"`
	Templ  struct {
		List []struct {
			Name       string `json:"name"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

type grafanaPanel struct {
	Type       string            `json:"type"`
	Title      string            `json:"title"`
	Datasource grafanaDatasource `json:"datasource"`
	Targets    []struct {
		Expr       string            `json:"expr"`
		Datasource grafanaDatasource `json:"datasource"`
	} `json:"targets"`
}

type grafanaDatasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// loadDashboard reads and decodes the queue dashboard.
func loadDashboard(t *testing.T) grafanaDashboard {
	t.Helper()
	data, err := os.ReadFile("grafana/dashboards/gpugov-queues.json")
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("gpugov-queues.json: %v", err)
	}
	return d
}

// Parts of a PromQL expression that are not metric names: string literals,
// label matchers, range and subquery durations, grouping label lists,
// numbers, and the language's keywords and aggregation modifiers.
var (
	promStrings   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promMatchers  = regexp.MustCompile(`\{[^}]*\}`)
	promRanges    = regexp.MustCompile(`\[[^\]]*\]`)
	promGrouping  = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promIdent     = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	promKeywords  = []string{"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset", "inf", "nan"}
	histogramPart = regexp.MustCompile(`_(?:bucket|sum|count)$`)
)

// metricNames returns the metric names a PromQL expression (or a Grafana
// label_values() query) reads: identifiers that are not functions (followed
// by "("), keywords, labels or literals.
func metricNames(expr string) []string {
	e := promStrings.ReplaceAllString(expr, " ")
	e = promMatchers.ReplaceAllString(e, " ")
	e = promRanges.ReplaceAllString(e, " ")
	e = promGrouping.ReplaceAllString(e, " ")
	var out []string
	for _, loc := range promIdent.FindAllStringIndex(e, -1) {
		name := e[loc[0]:loc[1]]
		rest := strings.TrimLeft(e[loc[1]:], " \t\n")
		if strings.HasPrefix(rest, "(") || slices.Contains(promKeywords, strings.ToLower(name)) {
			continue
		}
		if loc[0] > 0 && strings.ContainsRune("$.0123456789", rune(e[loc[0]-1])) { // a Grafana variable, or a number's or duration's unit
			continue
		}
		out = append(out, name)
	}
	return out
}

// definedMetric reports whether name is a series of a metric telemetry
// exports: a name of telemetry.MetricNames, or a histogram's
// _bucket/_sum/_count series of one.
func definedMetric(name string) bool {
	return slices.Contains(telemetry.MetricNames, name) ||
		slices.Contains(telemetry.MetricNames, histogramPart.ReplaceAllString(name, ""))
}

// TestDashboardUsesOnlyGpugovMetrics checks that every panel expression and
// template query of the queue dashboard reads only metrics that
// internal/telemetry defines (telemetry.MetricNames, itself checked against
// the exporter's output), through the provisioned Prometheus datasource.
func TestDashboardUsesOnlyGpugovMetrics(t *testing.T) {
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard uid %q title %q", d.UID, d.Title)
	}
	exprs := 0
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if p.Datasource.UID != "prometheus" || len(p.Targets) == 0 {
			t.Errorf("panel %q: datasource %+v, %d targets", p.Title, p.Datasource, len(p.Targets))
		}
		for _, tg := range p.Targets {
			names := metricNames(tg.Expr)
			if len(names) == 0 {
				t.Errorf("panel %q: expression %q reads no metric", p.Title, tg.Expr)
			}
			for _, n := range names {
				if !definedMetric(n) {
					t.Errorf("panel %q: %q reads %s, which internal/telemetry does not define", p.Title, tg.Expr, n)
				}
			}
			exprs++
		}
	}
	for _, v := range d.Templ.List {
		for _, n := range templateMetricNames(v.Definition) {
			if !definedMetric(n) {
				t.Errorf("variable %s: %q reads %s, which internal/telemetry does not define", v.Name, v.Definition, n)
			}
		}
	}
	if exprs < 9 {
		t.Errorf("only %d panel expressions", exprs)
	}
}

// TestDashboardHasQueuePanels checks the dashboard shows what the queue
// service needs: wait P50/P95/P99 by queue and tier, longest current wait
// and starving jobs per queue, waiting jobs by reason, the transition rate,
// cycle duration and placements.
func TestDashboardHasQueuePanels(t *testing.T) {
	var all []string
	for _, p := range loadDashboard(t).Panels {
		for _, tg := range p.Targets {
			all = append(all, strings.Join(strings.Fields(tg.Expr), " "))
		}
	}
	joined := strings.Join(all, "\n")
	for _, want := range []string{
		"histogram_quantile(0.5, sum by (le, queue, tier) (rate(gpugov_job_wait_seconds_bucket",
		"histogram_quantile(0.95, sum by (le, queue, tier) (rate(gpugov_job_wait_seconds_bucket",
		"histogram_quantile(0.99, sum by (le, queue, tier) (rate(gpugov_job_wait_seconds_bucket",
		"gpugov_queue_longest_wait_seconds", "gpugov_queue_starving_jobs",
		"sum by (reason) (max by (queue, reason) (gpugov_waiting_jobs", "rate(gpugov_wait_reason_transitions_total",
		"gpugov_scheduling_cycle_duration_seconds_bucket", "rate(gpugov_placements_total",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("no panel expression contains %q:\n%s", want, joined)
		}
	}
}

// TestMetricNamesParsing keeps the expression parser of these tests honest.
func TestMetricNamesParsing(t *testing.T) {
	got := metricNames(`histogram_quantile(0.95, sum by (le, queue) (rate(gpugov_job_wait_seconds_bucket{queue=~"$queue", tier!="x"}[$__rate_interval]))) / on (queue) group_left up offset 5m`)
	if strings.Join(got, ",") != "gpugov_job_wait_seconds_bucket,up" {
		t.Fatalf("metric names %v", got)
	}
	if definedMetric("up") || !definedMetric("gpugov_job_wait_seconds_count") || definedMetric("gpugov_waiting_jobs_bucket_x") {
		t.Fatal("definedMetric")
	}
	if got := templateMetricNames(`label_values(gpugov_waiting_jobs{pool="a"}, queue)`); strings.Join(got, ",") != "gpugov_waiting_jobs" {
		t.Fatalf("label_values metric names %v", got)
	}
}

// labelValues matches Grafana's label_values(SELECTOR, LABEL) variable query.
var labelValues = regexp.MustCompile(`^\s*label_values\((.*),\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*$`)

// templateMetricNames returns the metrics a template variable's query reads:
// label_values' selector, or the whole query as PromQL.
func templateMetricNames(def string) []string {
	if m := labelValues.FindStringSubmatch(def); m != nil {
		return metricNames(m[1])
	}
	return metricNames(def)
}

// TestGrafanaProvisioning checks the provisioning files docker-compose.yml
// mounts: the datasource points at the prometheus service with the uid the
// dashboard uses, and the dashboard provider reads the directory the
// dashboards are mounted at.
func TestGrafanaProvisioning(t *testing.T) {
	var ds struct {
		Datasources []struct {
			Name, UID, Type, URL string
		} `yaml:"datasources"`
	}
	readYAML(t, "grafana/provisioning/datasources/prometheus.yaml", &ds)
	if len(ds.Datasources) != 1 || ds.Datasources[0].URL != "http://prometheus:9090" ||
		ds.Datasources[0].UID != "prometheus" || ds.Datasources[0].Type != "prometheus" {
		t.Errorf("datasources %+v", ds.Datasources)
	}
	var dp struct {
		Providers []struct {
			Type    string `yaml:"type"`
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, "grafana/provisioning/dashboards/gpugov.yaml", &dp)
	if len(dp.Providers) != 1 || dp.Providers[0].Type != "file" || dp.Providers[0].Options.Path != "/var/lib/grafana/dashboards" {
		t.Errorf("dashboard providers %+v", dp.Providers)
	}
	mounts := strings.Join(loadCompose(t).Services["grafana"].Volumes, "\n")
	for _, m := range []string{"./deploy/grafana/provisioning:/etc/grafana/provisioning", "./deploy/grafana/dashboards:" + dp.Providers[0].Options.Path} {
		if !strings.Contains(mounts, m) {
			t.Errorf("grafana does not mount %s:\n%s", m, mounts)
		}
	}
	if _, err := os.Stat(filepath.Join("grafana", "dashboards", "gpugov-queues.json")); err != nil {
		t.Error(err)
	}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestDashboardHasReadinessAndEvidencePanels checks the dashboard shows the
// readiness of each pool and its failing checks, and the evidence behind
// automation: resume checks and their failure rate, preemption loss,
// reclaims, false reclaims (disputes less rejections) and experiment
// rollbacks, and production's wait against its objective — the quantities
// deploy/prometheus/alerts.yml alerts on.
func TestDashboardHasReadinessAndEvidencePanels(t *testing.T) {
	var all []string
	for _, p := range loadDashboard(t).Panels {
		for _, tg := range p.Targets {
			all = append(all, strings.Join(strings.Fields(tg.Expr), " "))
		}
	}
	joined := strings.Join(all, "\n")
	for _, want := range []string{
		"max by (pool) (gpugov_pool_ready)", "gpugov_pool_readiness_check",
		"sum by (pool, result) (increase(gpugov_preemption_resumes_total", `gpugov_preemption_resumes_total{result="wrong_step"}`,
		"gpugov_preemption_effective_loss_gpu_seconds_bucket", "gpugov_reclaims_total",
		"gpugov_false_reclaims_total", "gpugov_false_reclaims_rejected_total", "gpugov_experiment_rollbacks_total",
		`gpugov_queue_wait_objective_seconds{tier="production"}`,
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("no panel expression contains %q", want)
		}
	}
}
