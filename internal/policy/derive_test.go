package policy

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestFromCanonicalRoundTrips: a stored body, even re-encoded with its keys
// reordered (as jsonb returns it), decodes to the policy it was made from —
// every hashed field, webhooks, delivery schedule, queue shares and quotas
// included (testdata/roundtrip.yaml sets each) — with the same hash and the
// default simulation section; other documents are refused.
func TestFromCanonicalRoundTrips(t *testing.T) {
	for _, path := range []string{"testdata/good.yaml", "testdata/roundtrip.yaml", "../../deploy/gpugov/policy.yaml"} {
		p := mustLoad(t, path)
		var generic map[string]any
		if err := json.Unmarshal(p.Canonical(), &generic); err != nil {
			t.Fatal(err)
		}
		reencoded, _ := json.Marshal(generic) // keys sorted: another order than the struct's
		got, err := FromCanonical(reencoded)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if got.Hash() != p.Hash() || !reflect.DeepEqual(got.Simulation, Default().Simulation) {
			t.Fatalf("%s: decoded hash %s, want %s", path, got.Hash(), p.Hash())
		}
		if path == "testdata/roundtrip.yaml" && (len(p.Notifications.Webhooks) != 2 || p.Notifications.Webhooks[1].SecretFile == "" ||
			p.Queues[0].MinShare != 0.25 || len(p.Quotas) != 2 || p.Notifications.Delivery.MaxAttempts != 5) {
			t.Fatalf("%s: the fixture lost what it sets: %+v", path, p)
		}
		want := *p
		want.Simulation = Default().Simulation // not stored: FromCanonical gives the default
		if !reflect.DeepEqual(got, &want) {
			t.Fatalf("%s: decoded\n%+v\nwant\n%+v", path, got, &want)
		}
	}
	for _, bad := range []string{`{"version": "gpugov.policy/v1", "stage": 1}`, `{"version": "v0"}`, `{}`, `[1]`, `{"version": "gpugov.policy/v1"} {}`} {
		if _, err := FromCanonical([]byte(bad)); err == nil {
			t.Errorf("FromCanonical(%s) succeeded", bad)
		}
	}
}

// TestWithQuota: only the one quota changes, in place or appended, and the
// original policy is left as it was.
func TestWithQuota(t *testing.T) {
	p := Default()
	p.Quotas = []Quota{{Project: "a", Pool: "p", NominalMilli: 1000}, {Project: "b", Pool: "p", NominalMilli: 2000}}
	hash := p.Hash()
	c, before := p.WithQuota(Quota{Project: "a", Pool: "p", NominalMilli: 3000, BorrowingLimitMilli: 500})
	if before == nil || *before != p.Quotas[0] || c.Quotas[0].NominalMilli != 3000 || c.Quotas[1] != p.Quotas[1] || len(c.Quotas) != 2 {
		t.Fatalf("replace: %+v (before %+v)", c.Quotas, before)
	}
	if p.Hash() != hash || p.Quotas[0].NominalMilli != 1000 || c.Hash() == hash {
		t.Fatal("the original changed, or the copy's hash did not")
	}
	c.Quotas[0] = p.Quotas[0]
	if c.Hash() != hash {
		t.Fatal("the copy differs beyond the quota")
	}
	c, before = p.WithQuota(Quota{Project: "a", Pool: "q", NominalMilli: 1})
	if before != nil || len(c.Quotas) != 3 || c.Quotas[2].Pool != "q" {
		t.Fatalf("append: %+v (before %+v)", c.Quotas, before)
	}
	for _, tc := range []struct {
		q     Quota
		field string
	}{
		{Quota{Pool: "p"}, "project"},
		{Quota{Project: "a"}, "pool"},
		{Quota{Project: "a", Pool: "p", NominalMilli: -1}, "nominal_milli"},
		{Quota{Project: "a", Pool: "p", BorrowingLimitMilli: MaxQuotaMilli + 1}, "borrowing_limit_milli"},
		{Quota{Project: "a", Pool: "p", NominalMilli: MaxQuotaMilli}, ""},
	} {
		if f, _ := ValidateQuota(tc.q); f != tc.field {
			t.Errorf("ValidateQuota(%+v) names %q, want %q", tc.q, f, tc.field)
		}
	}
}

// TestWithoutQuota: only that pair's entries go, the others keep their
// order, and the original policy is left as it was.
func TestWithoutQuota(t *testing.T) {
	p := Default()
	p.Quotas = []Quota{{Project: "a", Pool: "p", NominalMilli: 1000}, {Project: "b", Pool: "p", NominalMilli: 2000},
		{Project: "c", Pool: "q", NominalMilli: 3000}}
	hash := p.Hash()
	c, removed := p.WithoutQuota("b", "p")
	if removed == nil || *removed != p.Quotas[1] || len(c.Quotas) != 2 || c.Quotas[0] != p.Quotas[0] || c.Quotas[1] != p.Quotas[2] {
		t.Fatalf("remove: %+v (removed %+v)", c.Quotas, removed)
	}
	if p.Hash() != hash || len(p.Quotas) != 3 || c.Hash() == hash {
		t.Fatal("the original changed, or the copy's hash did not")
	}
	c, removed = p.WithoutQuota("a", "q")
	if removed != nil || c.Hash() != hash {
		t.Fatalf("remove a missing pair: %+v (removed %+v)", c.Quotas, removed)
	}
}

// TestKeepUnhashed: the fields Canonical leaves out come from the file's
// policy; the hashed ones stay the version's.
func TestKeepUnhashed(t *testing.T) {
	file := mustLoad(t, "testdata/good.yaml")
	v, err := FromCanonical(Default().Canonical())
	if err != nil {
		t.Fatal(err)
	}
	v.KeepUnhashed(file)
	if !reflect.DeepEqual(v.Simulation, file.Simulation) || v.Hash() != Default().Hash() {
		t.Fatalf("simulation %+v, hash %s", v.Simulation, v.Hash())
	}
	v.KeepUnhashed(nil)
	if !reflect.DeepEqual(v.Simulation, file.Simulation) {
		t.Fatal("a nil source changed the policy")
	}
}
