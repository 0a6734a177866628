package store_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// quotaStore is a store with pool p (one node, 4 GPUs) and an active
// policy version (as serve stores at start) giving vision 1000 milli-GPU
// in p; it returns the store and that version's hash.
func quotaStore(t *testing.T) (*store.Store, string) {
	t.Helper()
	s, _ := storetest.NewStore(t, storetest.Fixture{Pools: []scheduling.Pool{testPool("p", 1, 4)}})
	ctx := context.Background()
	p := policy.Default()
	p.Quotas = []policy.Quota{{Project: "vision", Pool: "p", NominalMilli: 1000}}
	if err := s.SavePolicyVersion(ctx, p.Hash(), p.Canonical()); err != nil {
		t.Fatal(err)
	}
	if err := s.ActivatePolicyVersion(ctx, p.Hash(), "serve", "loaded from policy.yaml"); err != nil {
		t.Fatal(err)
	}
	if err := s.UpsertQuotas(ctx, p.SchedulingQuotas()); err != nil {
		t.Fatal(err)
	}
	return s, p.Hash()
}

// quotaCounts is what a refused quota action must leave as it was.
func quotaCounts(t *testing.T, s *store.Store) [4]int64 {
	return [4]int64{queryInt(t, s, `SELECT count(*) FROM policy_versions`), queryInt(t, s, `SELECT count(*) FROM audit_log`),
		queryInt(t, s, `SELECT count(*) FROM quota_requests`),
		queryInt(t, s, `SELECT coalesce(sum(nominal_milli + borrowing_limit_milli), 0) FROM quotas`)}
}

// TestSetQuotaIsAPolicyChange: setting a quota derives, stores and
// activates a policy version differing only in that quota, upserts the
// quota the snapshot reads, and audits it with before and after; a repeat
// changes nothing; bad input changes nothing.
func TestSetQuotaIsAPolicyChange(t *testing.T) {
	t.Parallel()
	s, base := quotaStore(t)
	ctx := context.Background()
	res, err := s.SetQuota(ctx, store.QuotaChange{Pool: "p", Project: "vision", NominalMilli: 3000, BorrowingLimitMilli: 1000,
		Actor: "root", Reason: "deadline"})
	if err != nil || !res.Changed || res.Before == nil || res.Before.NominalMilli != 1000 || res.PreviousPolicy != base || res.Policy == base {
		t.Fatalf("set: %+v %v", res, err)
	}
	active, err := s.ActivePolicyVersion(ctx)
	if err != nil || active.Hash != res.Policy || active.DerivedFrom != base || active.BaseHash != base {
		t.Fatalf("active %+v %v", active, err)
	}
	p, err := policy.FromCanonical(active.Body)
	if err != nil || p.Hash() != res.Policy || len(p.Quotas) != 1 || p.Quotas[0].NominalMilli != 3000 || p.Quotas[0].BorrowingLimitMilli != 1000 {
		t.Fatalf("derived policy %+v %v", p, err)
	}
	snap, err := s.LoadSnapshot(ctx, time.Now())
	if err != nil || len(snap.Quotas) != 1 || snap.Quotas[0].NominalMilli != 3000 {
		t.Fatalf("snapshot quotas %+v %v", snap, err)
	}
	audit, _ := s.AuditFor(ctx, "p/vision", 0)
	if len(audit) != 1 || audit[0].Action != store.AuditSetQuota || audit[0].Actor != "root" || audit[0].Reason != "deadline" ||
		audit[0].Evidence["before"].(map[string]any)["nominal_milli"] != float64(1000) ||
		audit[0].Evidence["after"].(map[string]any)["nominal_milli"] != float64(3000) || audit[0].Evidence["policy"] != res.Policy {
		t.Fatalf("audit %+v", audit)
	}
	if act, _ := s.AuditFor(ctx, res.Policy, 0); len(act) != 1 || act[0].Action != store.AuditActivatePolicy || act[0].Evidence["previous"] != base {
		t.Fatalf("activation audit %+v", act)
	}
	// A second change chains from the derived version, keeping the base.
	res2, err := s.SetQuota(ctx, store.QuotaChange{Pool: "p", Project: "new", NominalMilli: 500, Actor: "root", Reason: "onboarding"})
	if err != nil || res2.Before != nil || res2.PreviousPolicy != res.Policy {
		t.Fatalf("second: %+v %v", res2, err)
	}
	if a, _ := s.ActivePolicyVersion(ctx); a.DerivedFrom != res.Policy || a.BaseHash != base {
		t.Fatalf("chained version %+v", a)
	}

	before := quotaCounts(t, s)
	if res, err := s.SetQuota(ctx, store.QuotaChange{Pool: "p", Project: "new", NominalMilli: 500, Actor: "root", Reason: "again"}); err != nil || res.Changed {
		t.Fatalf("repeat: %+v %v", res, err)
	}
	for _, tc := range []struct {
		c     store.QuotaChange
		field string
	}{
		{store.QuotaChange{Pool: "p", Project: "vision", NominalMilli: -1, Actor: "root", Reason: "x"}, "nominal_milli"},
		{store.QuotaChange{Pool: "p", Project: "vision", BorrowingLimitMilli: policy.MaxQuotaMilli + 1, Actor: "root", Reason: "x"}, "borrowing_limit_milli"},
		{store.QuotaChange{Pool: "nowhere", Project: "vision", Actor: "root", Reason: "x"}, "pool"},
		{store.QuotaChange{Pool: "p", Project: "", Actor: "root", Reason: "x"}, "project"},
		{store.QuotaChange{Pool: "p", Project: "vision", Actor: "root"}, "reason"},
	} {
		var ve *store.ValidationError
		if _, err := s.SetQuota(ctx, tc.c); !errors.As(err, &ve) || ve.Field != tc.field {
			t.Errorf("SetQuota(%+v): %v, want a validation error naming %s", tc.c, err, tc.field)
		}
	}
	if after := quotaCounts(t, s); after != before {
		t.Fatalf("refused changes changed the store: %v → %v", before, after)
	}
}

// TestQuotaRequests: a request is stored pending and audited; approval
// sets the quota (as SetQuota) and records the policy version; denial
// changes no quota; a decided request cannot be decided again; bad input
// changes nothing.
func TestQuotaRequests(t *testing.T) {
	t.Parallel()
	s, base := quotaStore(t)
	ctx := context.Background()
	r, err := s.CreateQuotaRequest(ctx, store.NewQuotaRequest{Pool: "p", Project: "vision", NominalMilli: 2000, Reason: "paper deadline", Actor: "alice"})
	if err != nil || r.State != vocab.QuotaRequestPending || r.RequestedBy != "alice" || r.DecidedAt != nil || r.BorrowingLimitMilli != nil {
		t.Fatalf("create: %+v %v", r, err)
	}
	borrow := int64(4000)
	r2, err := s.CreateQuotaRequest(ctx, store.NewQuotaRequest{Pool: "p", Project: "audio", NominalMilli: 1000, BorrowingLimitMilli: &borrow, Reason: "new team", Actor: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := s.ListQuotaRequests(ctx, store.QuotaRequestFilter{State: vocab.QuotaRequestPending}); len(got) != 2 || got[0].ID != r2.ID {
		t.Fatalf("pending list %+v", got)
	}

	before := quotaCounts(t, s)
	var ve *store.ValidationError
	if _, err := s.CreateQuotaRequest(ctx, store.NewQuotaRequest{Pool: "p", Project: "vision", NominalMilli: 2000, Actor: "alice"}); !errors.As(err, &ve) || ve.Field != "reason" {
		t.Fatalf("no reason: %v", err)
	}
	if _, err := s.CreateQuotaRequest(ctx, store.NewQuotaRequest{Pool: "q", Project: "vision", NominalMilli: 2000, Reason: "x", Actor: "alice"}); !errors.As(err, &ve) || ve.Field != "pool" {
		t.Fatalf("unknown pool: %v", err)
	}
	if _, _, err := s.DecideQuotaRequest(ctx, r.ID, true, "root", ""); !errors.As(err, &ve) || ve.Field != "comment" {
		t.Fatalf("no comment: %v", err)
	}
	if _, _, err := s.DecideQuotaRequest(ctx, "qr-none", true, "root", "ok"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown request: %v", err)
	}
	if after := quotaCounts(t, s); after != before {
		t.Fatalf("refused requests changed the store: %v → %v", before, after)
	}

	got, change, err := s.DecideQuotaRequest(ctx, r.ID, true, "root", "granted for two weeks")
	if err != nil || got.State != vocab.QuotaRequestApproved || got.DecidedBy == nil || *got.DecidedBy != "root" ||
		change == nil || !change.Changed || change.After.NominalMilli != 2000 || change.PreviousPolicy != base ||
		got.PolicyHash == nil || *got.PolicyHash != change.Policy {
		t.Fatalf("approve: %+v %+v %v", got, change, err)
	}
	if a, _ := s.ActivePolicyHash(ctx); a != change.Policy {
		t.Fatalf("active %s, want the approval's %s", a, change.Policy)
	}
	audit, _ := s.AuditFor(ctx, r.ID, 0)
	if len(audit) != 2 || audit[0].Action != store.AuditRequestQuota || audit[1].Action != store.AuditApproveQuotaRequest ||
		audit[1].Evidence["after"].(map[string]any)["nominal_milli"] != float64(2000) ||
		audit[1].Evidence["before"].(map[string]any)["nominal_milli"] != float64(1000) {
		t.Fatalf("request audit %+v", audit)
	}
	if set, _ := s.AuditFor(ctx, "p/vision", 0); len(set) != 1 || set[0].Evidence["request_id"] != r.ID {
		t.Fatalf("set_quota audit %+v", set)
	}
	if _, _, err := s.DecideQuotaRequest(ctx, r.ID, false, "root", "changed my mind"); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second decision: %v", err)
	}

	quotasBefore := queryInt(t, s, `SELECT count(*) FROM quotas`)
	got, change, err = s.DecideQuotaRequest(ctx, r2.ID, false, "root", "no budget")
	if err != nil || got.State != vocab.QuotaRequestDenied || change != nil || got.PolicyHash != nil {
		t.Fatalf("deny: %+v %+v %v", got, change, err)
	}
	if n := queryInt(t, s, `SELECT count(*) FROM quotas`); n != quotasBefore {
		t.Fatalf("denial changed the quotas: %d → %d", quotasBefore, n)
	}
	if got, _ := s.ListQuotaRequests(ctx, store.QuotaRequestFilter{State: vocab.QuotaRequestDenied}); len(got) != 1 || got[0].ID != r2.ID {
		t.Fatalf("denied list %+v", got)
	}
}

// activatePolicy stores and activates p as serve does at a reload.
func activatePolicy(t *testing.T, s *store.Store, p *policy.Policy, reason string) {
	t.Helper()
	ctx := context.Background()
	if err := s.SavePolicyVersion(ctx, p.Hash(), p.Canonical()); err != nil {
		t.Fatal(err)
	}
	if err := s.ActivatePolicyVersion(ctx, p.Hash(), "serve", reason); err != nil {
		t.Fatal(err)
	}
}

// TestSyncQuotas: the stored quotas become exactly the active version's,
// each change audited with before and after (after null for a removed
// quota); a repeat changes nothing.
func TestSyncQuotas(t *testing.T) {
	t.Parallel()
	s, _ := quotaStore(t) // vision 1000 in p
	ctx := context.Background()
	if err := s.UpsertQuotas(ctx, []scheduling.Quota{{Project: "audio", Pool: "p", NominalMilli: 500}}); err != nil {
		t.Fatal(err)
	}
	p := policy.Default()
	p.Quotas = []policy.Quota{{Project: "vision", Pool: "p", NominalMilli: 2000}, {Project: "text", Pool: "p", NominalMilli: 100},
		{Project: "text", Pool: "p", NominalMilli: 999}} // a duplicate: the first entry wins
	activatePolicy(t, s, p, "loaded from policy.yaml")
	want := p.SchedulingQuotas()
	changed, err := s.SyncQuotas(ctx, "serve", "loaded from policy.yaml")
	if err != nil || len(changed) != 3 || changed[0] != "p/audio" || changed[1] != "p/text" || changed[2] != "p/vision" {
		t.Fatalf("sync: %v %v", changed, err)
	}
	snap, _ := s.LoadSnapshot(ctx, time.Now())
	if len(snap.Quotas) != 2 || snap.Quotas[0] != want[1] || snap.Quotas[1] != want[0] {
		t.Fatalf("stored quotas %+v", snap.Quotas)
	}
	removed, _ := s.AuditFor(ctx, "p/audio", 0)
	if len(removed) != 1 || removed[0].Evidence["after"] != nil || removed[0].Evidence["before"].(map[string]any)["nominal_milli"] != float64(500) ||
		removed[0].Evidence["policy"] != p.Hash() {
		t.Fatalf("removal audit %+v", removed)
	}
	if changed, err := s.SyncQuotas(ctx, "serve", "again"); err != nil || len(changed) != 0 {
		t.Fatalf("repeat: %v %v", changed, err)
	}
}

// TestReloadKeepsAQuotaChangeMadeDuringIt runs a reload's store steps with
// a quota change committed between the activation and the quota sync, as
// a race orders them: the change derived its version from the reload's,
// and the sync keeps it, so the stored quotas and the active version agree.
func TestReloadKeepsAQuotaChangeMadeDuringIt(t *testing.T) {
	t.Parallel()
	s, _ := quotaStore(t) // vision 1000 in p
	ctx := context.Background()
	file := policy.Default()
	file.Quotas = []policy.Quota{{Project: "vision", Pool: "p", NominalMilli: 2000}}
	activatePolicy(t, s, file, "loaded from policy.yaml")
	res, err := s.SetQuota(ctx, store.QuotaChange{Pool: "p", Project: "vision", NominalMilli: 3000, Actor: "root", Reason: "deadline"})
	if err != nil || res.PreviousPolicy != file.Hash() {
		t.Fatalf("set: %+v %v", res, err)
	}
	if _, err := s.SyncQuotas(ctx, "serve", "loaded from policy.yaml"); err != nil {
		t.Fatal(err)
	}
	active, err := s.ActivePolicyVersion(ctx)
	if err != nil || active.Hash != res.Policy {
		t.Fatalf("active %+v %v, want the quota change's %s", active, err, res.Policy)
	}
	v, err := policy.FromCanonical(active.Body)
	if err != nil {
		t.Fatal(err)
	}
	snap, _ := s.LoadSnapshot(ctx, time.Now())
	if !reflect.DeepEqual(snap.Quotas, v.SchedulingQuotas()) || snap.Quotas[0].NominalMilli != 3000 {
		t.Fatalf("stored quotas %+v, active version's %+v", snap.Quotas, v.SchedulingQuotas())
	}
}

// TestSetQuotaDerivesFromTheExamplePolicy: the example policy, stored as
// jsonb (keys reordered), is derived from exactly; concurrent quota changes
// all apply, each from the version the previous one activated.
func TestSetQuotaDerivesFromTheExamplePolicy(t *testing.T) {
	t.Parallel()
	s, _ := storetest.NewStore(t, storetest.Fixture{Pools: []scheduling.Pool{testPool("p", 1, 4)}})
	ctx := context.Background()
	p, err := policy.Load("../deploy/gpugov/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SavePolicyVersion(ctx, p.Hash(), p.Canonical()); err != nil {
		t.Fatal(err)
	}
	if err := s.ActivatePolicyVersion(ctx, p.Hash(), "serve", "example"); err != nil {
		t.Fatal(err)
	}
	const n = 4
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := s.SetQuota(ctx, store.QuotaChange{Pool: "p", Project: string(rune('a' + i)), NominalMilli: int64(1000 * (i + 1)),
				Actor: "root", Reason: "concurrent"})
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	active, _ := s.ActivePolicyVersion(ctx)
	got, err := policy.FromCanonical(active.Body)
	if err != nil || got.Hash() != active.Hash || len(got.Quotas) != n || active.BaseHash != p.Hash() {
		t.Fatalf("after %d concurrent changes: %+v %v", n, got.Quotas, err)
	}
	got.Quotas = nil
	if got.Hash() != p.Hash() {
		t.Fatal("the derived version differs from the example beyond its quotas")
	}
}

// TestApprovalReasonIsBounded: approving a request whose reason and comment
// each take MaxQuotaText bytes audits the quota change and the policy switch
// with reasons of at most MaxQuotaText bytes, valid UTF-8, marked as cut.
func TestApprovalReasonIsBounded(t *testing.T) {
	t.Parallel()
	s, _ := quotaStore(t)
	ctx := context.Background()
	long := strings.Repeat("é", store.MaxQuotaText/2) // 2-byte runes: a cut could split one
	r, err := s.CreateQuotaRequest(ctx, store.NewQuotaRequest{Pool: "p", Project: "vision", NominalMilli: 2000, Reason: long, Actor: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.DecideQuotaRequest(ctx, r.ID, true, "root", "x"+long[2:]); err != nil {
		t.Fatal(err)
	}
	set, _ := s.AuditFor(ctx, "p/vision", 0)
	active, _ := s.ActivePolicyHash(ctx)
	switched, _ := s.AuditFor(ctx, active, 0)
	if len(set) != 1 || len(switched) != 1 {
		t.Fatalf("audit: set_quota %+v, activate_policy %+v", set, switched)
	}
	for _, e := range []store.AuditEntry{set[0], switched[0]} {
		if len(e.Reason) > store.MaxQuotaText || !utf8.ValidString(e.Reason) || !strings.HasSuffix(e.Reason, "…") ||
			!strings.Contains(e.Reason, r.ID) {
			t.Fatalf("%s reason (%d bytes) %q, want at most %d bytes, cut with …", e.Action, len(e.Reason), e.Reason, store.MaxQuotaText)
		}
	}
}

// TestLoadQuotaAccounting: the quota ledger over LoadQuotaAccounting is the
// one over the scheduler's snapshot, and the load does not wait for a
// snapshot load in progress (LoadSnapshot's lock held).
func TestLoadQuotaAccounting(t *testing.T) {
	t.Parallel()
	s, _ := storetest.NewStore(t, storetest.Fixture{Pools: []scheduling.Pool{testPool("p", 1, 4)}, Queues: []scheduling.Queue{storetest.TrainQueue}})
	ctx := context.Background()
	if err := s.UpsertQuotas(ctx, []scheduling.Quota{{Project: "audio", Pool: "p", NominalMilli: 2000, BorrowingLimitMilli: 500},
		{Project: "vision", Pool: "p", NominalMilli: 1000}}); err != nil {
		t.Fatal(err)
	}
	var placements []scheduling.Placement
	for i, gpus := range []int{2, 1} {
		j, _, err := s.CreateJob(ctx, &store.NewJob{Project: "vision", Queue: "train", Tier: vocab.TierStandard,
			Request: scheduling.ResourceRequest{GPUs: gpus, Pool: "p"}, RunSeconds: 100})
		if err != nil {
			t.Fatal(err)
		}
		shares := []scheduling.GPUShare{{UUID: storetest.GPUName("p", 0, 2*i), Milli: 1000}}
		if gpus == 2 {
			shares = append(shares, scheduling.GPUShare{UUID: storetest.GPUName("p", 0, 1), Milli: 1000})
		}
		placements = append(placements, scheduling.Placement{JobID: j.ID, Pool: "p", Node: storetest.NodeName("p", 0), Rank: i + 1, GPUs: shares})
	}
	if _, _, err := s.CreateJob(ctx, &store.NewJob{Project: "audio", Queue: "train", Tier: vocab.TierStandard,
		Request: scheduling.ResourceRequest{GPUs: 1, Pool: "p"}, RunSeconds: 100}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if out, err := s.ApplyCycle(ctx, "c1", &scheduling.Result{At: now, Placements: placements}, now); err != nil || len(out.Placed) != 2 {
		t.Fatalf("placement: %+v %v", out, err)
	}
	snap, err := s.LoadSnapshot(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	want := scheduling.QuotaLedger(snap)
	unlock := s.LockSnapshotCache()
	defer unlock()
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	acc, err := s.LoadQuotaAccounting(lctx)
	if err != nil {
		t.Fatalf("load while a snapshot load holds its lock: %v", err)
	}
	got := scheduling.QuotaLedger(acc)
	if !reflect.DeepEqual(got, want) || len(got) != 2 || got[1].Project != "vision" || got[1].UsedMilli != 3000 || got[1].BorrowedMilli != 2000 {
		t.Fatalf("ledger %+v, want the snapshot's %+v (vision using 3000)", got, want)
	}
}
