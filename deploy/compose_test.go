// Package deploy_test checks docker-compose.yml without a Docker engine (none
// runs on the development and CI machines): the services exist, images are
// pinned, and addresses, ports, environment and mounted files wire together.
package deploy_test

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/gpugov/gpugov/internal/policy"
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
	if temporal.Environment["POSTGRES_SEEDS"] != "postgresql" || temporal.Environment["POSTGRES_PWD"] != pg.Environment["POSTGRES_PASSWORD"] {
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

// publishes reports whether s publishes containerPort on the host.
func publishes(s composeService, containerPort string) bool {
	for _, p := range s.Ports {
		if strings.HasSuffix(p, ":"+containerPort) {
			return true
		}
	}
	return false
}
