// Package deploy_test checks docker-compose.yml without a Docker engine (none
// runs on the development and CI machines): the services exist, images are
// pinned, and addresses, ports, environment and mounted files wire together.
package deploy_test

import (
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/temporalx/temporaltest"
)

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image       string            `yaml:"image"`
	Build       *composeBuild     `yaml:"build"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Ports       []string          `yaml:"ports"`
	Volumes     []string          `yaml:"volumes"`
	DependsOn   yaml.Node         `yaml:"depends_on"`
}

type composeBuild struct {
	Context    string `yaml:"context"`
	Dockerfile string `yaml:"dockerfile"`
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	data, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var f composeFile
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return f
}

// dependsOn returns the service names of depends_on in either compose form
// (a list, or a map with conditions).
func dependsOn(n yaml.Node) []string {
	var names []string
	switch n.Kind {
	case yaml.SequenceNode:
		for _, c := range n.Content {
			names = append(names, c.Value)
		}
	case yaml.MappingNode:
		for i := 0; i < len(n.Content); i += 2 {
			names = append(names, n.Content[i].Value)
		}
	}
	return names
}

func TestComposeServicesExistAndArePinned(t *testing.T) {
	f := loadCompose(t)
	for _, name := range []string{"postgresql", "temporal", "temporal-ui", "gpugov", "agent", "prometheus", "grafana"} {
		if _, ok := f.Services[name]; !ok {
			t.Errorf("service %q missing", name)
		}
	}
	for name, s := range f.Services {
		switch {
		case s.Build != nil:
			if _, err := os.Stat(filepath.Join("..", s.Build.Context, s.Build.Dockerfile)); err != nil {
				t.Errorf("%s: build file: %v", name, err)
			}
		case s.Image == "" || !strings.Contains(s.Image, ":") || strings.HasSuffix(s.Image, ":latest"):
			t.Errorf("%s: image %q is not pinned to a version", name, s.Image)
		}
		for _, dep := range dependsOn(s.DependsOn) {
			if _, ok := f.Services[dep]; !ok {
				t.Errorf("%s depends on unknown service %q", name, dep)
			}
		}
		for _, v := range s.Volumes {
			src := strings.SplitN(v, ":", 2)[0]
			if strings.HasPrefix(src, "./") {
				if _, err := os.Stat(filepath.Join("..", src)); err != nil {
					t.Errorf("%s mounts %s: %v", name, src, err)
				}
			} else if _, ok := f.Volumes[src]; !ok {
				t.Errorf("%s mounts named volume %q that is not declared", name, src)
			}
		}
	}
}

func TestComposeAddressesPointAtServices(t *testing.T) {
	f := loadCompose(t)
	pg := f.Services["postgresql"]
	gov := f.Services["gpugov"]

	u, err := url.Parse(gov.Environment["DATABASE_URL"])
	if err != nil {
		t.Fatalf("gpugov DATABASE_URL: %v", err)
	}
	if u.Hostname() != "postgresql" || u.Port() != "5432" {
		t.Errorf("gpugov DATABASE_URL host %q port %q, want the postgresql service on 5432", u.Hostname(), u.Port())
	}
	if pw, _ := u.User.Password(); pw != pg.Environment["POSTGRES_PASSWORD"] || u.User.Username() != pg.Environment["POSTGRES_USER"] {
		t.Errorf("gpugov DATABASE_URL credentials do not match the postgresql service")
	}
	temporal := f.Services["temporal"]
	if temporal.Environment["GPUGOV_TEMPORAL_PG_HOST"] != "postgresql" || temporal.Environment["GPUGOV_TEMPORAL_PG_PORT"] != "5432" ||
		temporal.Environment["GPUGOV_TEMPORAL_PG_USER"] != pg.Environment["POSTGRES_USER"] ||
		temporal.Environment["GPUGOV_TEMPORAL_PG_PASSWORD"] != pg.Environment["POSTGRES_PASSWORD"] {
		t.Errorf("temporal is not configured for the postgresql service")
	}
	for _, name := range []string{"gpugov", "agent", "temporal-ui"} {
		if got := f.Services[name].Environment["TEMPORAL_ADDRESS"]; got != "temporal:7233" {
			t.Errorf("%s TEMPORAL_ADDRESS = %q, want temporal:7233", name, got)
		}
	}
	if !publishes(temporal, "7233") {
		t.Errorf("temporal does not publish 7233")
	}
	apiPort := gov.Environment["GPUGOV_API_ADDR"][strings.LastIndex(gov.Environment["GPUGOV_API_ADDR"], ":")+1:]
	if !publishes(gov, apiPort) {
		t.Errorf("gpugov listens on %s but does not publish it", apiPort)
	}
	if got := f.Services["agent"].Environment["GPUGOV_API"]; got != "http://gpugov:"+apiPort {
		t.Errorf("agent GPUGOV_API = %q, want http://gpugov:%s", got, apiPort)
	}
	// The policy file serve reads is the mounted example (./deploy/gpugov at
	// /etc/gpugov), and it loads.
	if pf, ok := strings.CutPrefix(gov.Environment["GPUGOV_POLICY_FILE"], "/etc/gpugov/"); !ok {
		t.Errorf("gpugov GPUGOV_POLICY_FILE = %q, want a file of the /etc/gpugov mount", gov.Environment["GPUGOV_POLICY_FILE"])
	} else if _, err := policy.Load(filepath.Join("gpugov", pf)); err != nil {
		t.Errorf("gpugov GPUGOV_POLICY_FILE: %v", err)
	}
	prom, err := os.ReadFile("prometheus/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(prom), "gpugov:"+apiPort) {
		t.Errorf("prometheus does not scrape gpugov:%s", apiPort)
	}
}

// TestComposeRunsTwoReplicas: the stack has the production topology of
// several gpugov replicas (docs/design.md §8 "Several replicas"): gpugov-2
// runs the same serve command, image and environment as gpugov against the
// same PostgreSQL and Temporal, publishes its API on a host port of its
// own, and Prometheus scrapes both.
func TestComposeRunsTwoReplicas(t *testing.T) {
	f := loadCompose(t)
	one, two := f.Services["gpugov"], f.Services["gpugov-2"]
	if two.Build == nil || one.Build == nil || *two.Build != *one.Build {
		t.Errorf("gpugov-2 build %+v, want gpugov's %+v", two.Build, one.Build)
	}
	if !slices.Equal(one.Command, two.Command) || len(two.Command) == 0 || two.Command[0] != "serve" {
		t.Errorf("gpugov-2 command %q, want gpugov's %q (serve)", two.Command, one.Command)
	}
	if len(one.Environment) == 0 || len(one.Environment) != len(two.Environment) {
		t.Errorf("gpugov-2 environment %v, want gpugov's %v", two.Environment, one.Environment)
	}
	for k, v := range one.Environment {
		if two.Environment[k] != v {
			t.Errorf("gpugov-2 %s = %q, want gpugov's %q", k, two.Environment[k], v)
		}
	}
	if !slices.Equal(one.Volumes, two.Volumes) {
		t.Errorf("gpugov-2 volumes %q, want gpugov's %q", two.Volumes, one.Volumes)
	}
	hostPort := func(s composeService) string {
		if len(s.Ports) != 1 {
			return ""
		}
		return strings.SplitN(s.Ports[0], ":", 2)[0]
	}
	if h1, h2 := hostPort(one), hostPort(two); h1 == "" || h2 == "" || h1 == h2 {
		t.Errorf("gpugov publishes %q and gpugov-2 %q: want one host port each, different", one.Ports, two.Ports)
	}
	prom, err := os.ReadFile("prometheus/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	apiPort := one.Environment["GPUGOV_API_ADDR"][strings.LastIndex(one.Environment["GPUGOV_API_ADDR"], ":")+1:]
	if !strings.Contains(string(prom), "gpugov-2:"+apiPort) {
		t.Errorf("prometheus does not scrape gpugov-2:%s", apiPort)
	}
}

// publishes reports whether s publishes containerPort on the host.
func publishes(s composeService, containerPort string) bool {
	for _, p := range s.Ports {
		if strings.HasSuffix(p, ":"+containerPort) {
			return true
		}
	}
	return false
}

// TestComposeTemporalRunsTheClusterConfig: the compose stack's Temporal is
// the one `make run-cluster` runs — the image deploy/temporal/Dockerfile
// builds at the versions deploy/dev/env.sh pins, started by
// deploy/dev/cluster.sh with deploy/temporal/ (cluster.yaml and its dynamic
// config) mounted where the script reads it — so both have cluster.yaml's
// history shards (temporaltest.ClusterShards, what StartCluster's tests
// check the server reports), and every setting it passes is one
// cluster.yaml or cluster.sh reads.
func TestComposeTemporalRunsTheClusterConfig(t *testing.T) {
	temporal := loadCompose(t).Services["temporal"]
	if temporal.Build == nil || temporal.Build.Dockerfile != "deploy/temporal/Dockerfile" {
		t.Fatalf("temporal is not built from deploy/temporal/Dockerfile: %+v", temporal.Build)
	}
	if !slices.Contains(temporal.Volumes, "./deploy/temporal:/gpugov/deploy/temporal:ro") {
		t.Errorf("temporal does not mount ./deploy/temporal at /gpugov/deploy/temporal: %v", temporal.Volumes)
	}
	dockerfile := readFile(t, "temporal/Dockerfile")
	if !strings.Contains(dockerfile, `ENTRYPOINT ["/gpugov/deploy/dev/cluster.sh", "foreground"]`) ||
		!strings.Contains(dockerfile, "COPY deploy/dev/env.sh deploy/dev/cluster.sh /gpugov/deploy/dev/") {
		t.Errorf("deploy/temporal/Dockerfile does not run deploy/dev/cluster.sh foreground from /gpugov")
	}
	envSh := readFile(t, "dev/env.sh")
	for _, v := range []string{"TEMPORAL_SERVER_VERSION", "TEMPORAL_VERSION"} {
		want := regexp.MustCompile(`export ` + v + `="\$\{` + v + `:-(v[0-9.]+)\}"`).FindStringSubmatch(envSh)
		got := regexp.MustCompile(`(?m)^ARG ` + v + `=(v[0-9.]+)$`).FindStringSubmatch(dockerfile)
		if want == nil || got == nil || want[1] != got[1] {
			t.Errorf("%s: deploy/dev/env.sh pins %v, deploy/temporal/Dockerfile %v", v, want, got)
		}
	}
	cluster := readFile(t, "temporal/cluster.yaml")
	m := regexp.MustCompile(`(?m)^\s*numHistoryShards:\s*(\d+)\s*$`).FindStringSubmatch(cluster)
	if m == nil {
		t.Fatal("deploy/temporal/cluster.yaml states no numHistoryShards")
	}
	if n, _ := strconv.Atoi(m[1]); n != temporaltest.ClusterShards {
		t.Errorf("cluster.yaml numHistoryShards = %d, temporaltest.ClusterShards = %d", n, temporaltest.ClusterShards)
	}
	script := readFile(t, "dev/cluster.sh")
	for k, v := range temporal.Environment {
		if !strings.Contains(cluster, `"`+k+`"`) && !strings.Contains(script, k) {
			t.Errorf("temporal sets %s, which neither cluster.yaml nor cluster.sh reads", k)
		}
		if k == "GPUGOV_TEMPORAL_DYNAMIC_CONFIG" {
			if rel, ok := strings.CutPrefix(v, "/gpugov/deploy/temporal/"); !ok {
				t.Errorf("GPUGOV_TEMPORAL_DYNAMIC_CONFIG = %q, not in the mounted deploy/temporal", v)
			} else if _, err := os.Stat(filepath.Join("temporal", rel)); err != nil {
				t.Errorf("GPUGOV_TEMPORAL_DYNAMIC_CONFIG: %v", err)
			}
		}
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
