package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// TestNotificationsCommand runs `gpugov notifications` against the real
// API with a submitter token: none at first; then its project's placement
// and a dead letter are listed (the other project's is not), filtered by
// state, printed as JSON; bad flags and another project exit 2.
func TestNotificationsCommand(t *testing.T) {
	ctx := context.Background()
	env := newGovCLIEnv(t, api.Principal{Name: "alice", Project: "vision", Role: vocab.RoleSubmitter})
	out, _, err := env.run(t, "notifications")
	if err != nil || !strings.HasPrefix(out, "no notifications") {
		t.Fatalf("empty: %v\n%s", err, out)
	}
	var ps []scheduling.Placement
	for i, project := range []string{"vision", "vision", "speech"} {
		j, _, err := env.store.CreateJob(ctx, &store.NewJob{Project: project, Queue: govQueue, Tier: vocab.TierStandard,
			Request: scheduling.ResourceRequest{GPUs: 1, Pool: govPool}, RunSeconds: 100})
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, storetest.Placement(j.ID, govPool, govNode, 1000, []string{"GPU-0", "GPU-1", "GPU-2"}[i]))
	}
	storetest.Place(t, env.store, "c-cli", time.Now(), ps...)
	pend, err := env.store.PendingNotifications(ctx, "vision", 10)
	if err != nil || len(pend) != 2 {
		t.Fatalf("pending %d %v", len(pend), err)
	}
	if _, err := env.store.RecordNotificationAttempt(ctx, pend[0].ID, store.NotificationAttempt{At: time.Now(), Status: 500,
		Error: "webhook answered 500"}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.store.FinishNotification(ctx, pend[0].ID, vocab.NotificationDead, "", time.Now()); err != nil {
		t.Fatal(err)
	}
	out, _, err = env.run(t, "notifications")
	if err != nil || strings.Count(out, "job.placed") != 2 || strings.Contains(out, "speech") ||
		!strings.Contains(out, "LAST ERROR") || !strings.Contains(out, "webhook answered 500") {
		t.Fatalf("list: %v\n%s", err, out)
	}
	t.Logf("gpugov notifications:\n%s", out)
	out, _, err = env.run(t, "notifications", "--state", "dead")
	if err != nil || !strings.Contains(out, pend[0].ID) || strings.Contains(out, pend[1].ID) {
		t.Fatalf("dead: %v\n%s", err, out)
	}
	out, _, err = env.run(t, "notifications", "--job", pend[1].JobID, "--format", "json")
	if err != nil || !strings.Contains(out, `"id": "`+pend[1].ID+`"`) || strings.Contains(out, pend[0].ID) {
		t.Fatalf("json: %v\n%s", err, out)
	}
	for _, args := range [][]string{
		{"--state", "lost"},     // 422 from the server
		{"--project", "speech"}, // 403: another project
		{"--limit", "-1"},
		{"--format", "csv"},
		{"extra"},
	} {
		_, _, err := env.run(t, append([]string{"notifications"}, args...)...)
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("notifications %v: %T %v, want a usage error (exit 2)", args, err, err)
		}
	}
}
