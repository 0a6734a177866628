package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/internal/inventory/static"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/temporalx/temporaltest"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

const devTokens = "../../deploy/gpugov/tokens.yaml"

// TestDeployFiles: the development token file and the compose inventory parse,
// with the tokens the README and run.sh name.
func TestDeployFiles(t *testing.T) {
	toks, err := api.LoadTokens(devTokens)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := toks.Lookup("dev-admin"); !ok || p.Role != vocab.RoleAdmin {
		t.Errorf("dev-admin = %+v, %v; want an admin", p, ok)
	}
	if p, ok := toks.Lookup("dev-project-03"); !ok || p.Role != vocab.RoleSubmitter || p.Project != "project-03" {
		t.Errorf("dev-project-03 = %+v, %v; want a submitter of project-03", p, ok)
	}
	inv, err := static.Load("../../deploy/gpugov/inventory.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Pools) != 1 || inv.Pools[0].Name != "sim" || inv.Pools[0].Nodes[0].Name != "sim-node-0" {
		t.Errorf("compose inventory %+v; want pool sim with node sim-node-0 (docker-compose.yml's agent)", inv.Pools)
	}
}

// TestServeConfig turns flags into the service config: files are read, and
// bad values or files are usage errors.
func TestServeConfig(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	good := serveOptions{cycleInterval: time.Second, simSpeed: 600, workflowCache: 100, reconcileInterval: time.Second, tokensFile: devTokens,
		sampleRetention: 48 * time.Hour, decisionRetention: 72 * time.Hour,
		inventoryFile: "../../internal/trace/alibaba/testdata/nodes_good.csv", inventoryFormat: "auto",
		policyFile: "../../deploy/gpugov/policy.yaml"}
	cfg, err := good.config(logger)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Tokens.Len() == 0 || len(cfg.Inventory) != 1 || cfg.PolicyFile != good.policyFile || cfg.GPUSampleRetention != 48*time.Hour ||
		cfg.DecisionRetention != 72*time.Hour || cfg.WorkflowCacheSize != 100 {
		t.Errorf("config %+v: want tokens, one pool, the policy file, 48h sample and 72h decision retention", cfg)
	}
	for name, mutate := range map[string]func(*serveOptions){
		"cycle interval":   func(o *serveOptions) { o.cycleInterval = 100 * time.Millisecond },
		"sim speed":        func(o *serveOptions) { o.simSpeed = 0 },
		"workflow cache":   func(o *serveOptions) { o.workflowCache = 0 },
		"reconcile":        func(o *serveOptions) { o.reconcileInterval = 0 },
		"sample retention": func(o *serveOptions) { o.sampleRetention = 0 },
		// Shorter than the policy file's reclaim observation window (40 s).
		"sample retention below the observation window": func(o *serveOptions) { o.sampleRetention = 30 * time.Second },
		"decision retention":                            func(o *serveOptions) { o.decisionRetention = -time.Hour },
		"tokens file":                                   func(o *serveOptions) { o.tokensFile = "missing.yaml" },
		"no tokens":                                     func(o *serveOptions) { o.tokensFile = "" }, // no deploy/ under cmd/gpugov
		"inventory file":                                func(o *serveOptions) { o.inventoryFile = devTokens },
		"inventory format":                              func(o *serveOptions) { o.inventoryFormat = "xml" },
		"policy file":                                   func(o *serveOptions) { o.policyFile = devTokens },
		"no policy file":                                func(o *serveOptions) { o.policyFile = "missing.yaml" },
		"TLS key alone":                                 func(o *serveOptions) { o.tlsKey = "key.pem" },
		"TLS files missing":                             func(o *serveOptions) { o.tlsCert, o.tlsKey = "/missing/cert.pem", "/missing/key.pem" },
		"negative rate":                                 func(o *serveOptions) { o.limits.RatePerSecond = -1 },
		"tiny header limit":                             func(o *serveOptions) { o.limits.MaxHeaderBytes = 100 },
	} {
		o := good
		mutate(&o)
		if _, err := o.config(logger); !isUsageError(err) {
			t.Errorf("%s: %v, want a usage error", name, err)
		}
	}
}

// TestServeCommand runs `gpugov serve` against a fresh database and dev
// server until its context ends: it becomes ready, serves the API with the
// given tokens, and shuts down without error.
func TestServeCommand(t *testing.T) {
	dbURL := storetest.NewDatabase(t)
	dev := temporaltest.Start(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, _, err := runGpugov(ctx, "serve", "--database-url", dbURL, "--temporal-address", dev.HostPort,
			"--api-addr", addr, "--tokens-file", devTokens, "--log-level", "error",
			"--inventory-file", "../../internal/trace/alibaba/testdata/nodes_good.csv")
		done <- err
	}()
	base := "http://" + addr
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case err := <-done:
			t.Fatalf("serve exited: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("serve not ready within a minute")
		}
		time.Sleep(200 * time.Millisecond)
	}
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/inventory", nil)
	req.Header.Set("Authorization", "Bearer dev-admin")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"name":"alibaba"`) {
		t.Errorf("GET /v1/inventory: %d %s", resp.StatusCode, body)
	}
	// Without --policy the default policy is in force, stored and active
	// like a file's.
	st, err := store.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	active, err := st.ActivePolicyVersion(ctx)
	st.Close()
	if err != nil || active.Hash != policy.Default().Hash() {
		t.Errorf("active policy version %+v, %v; want the default policy's %s", active, err, policy.Default().Hash())
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop within 30 s of its context ending")
	}
}
