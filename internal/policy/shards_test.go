package policy

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestShards(t *testing.T) {
	p, err := Parse("p.yaml", []byte("version: gpugov.policy/v1\nshards:\n  train: [a100-west, a100-east]\n  infer: [l4]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.ShardNames(); !slices.Equal(got, []string{"default", "infer", "train"}) {
		t.Fatalf("shard names %v", got)
	}
	if got := p.PoolShards(); got["a100-east"] != "train" || got["l4"] != "infer" || len(got) != 3 {
		t.Fatalf("pool shards %v", got)
	}
	// Absent: every pool in "default", one scheduler as before the field.
	d, err := Parse("p.yaml", []byte("version: gpugov.policy/v1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if d.PoolShards() != nil || !slices.Equal(d.ShardNames(), []string{"default"}) {
		t.Fatalf("default policy shards %v %v", d.PoolShards(), d.ShardNames())
	}
	if d.Hash() == p.Hash() {
		t.Fatal("shards not part of the hash")
	}
	// The stored version keeps them (serve's policy in force is decoded from it).
	body := p.Canonical()
	back, err := FromCanonical(body)
	if err != nil || back.PoolShards()["l4"] != "infer" {
		t.Fatalf("from canonical: %v %v", back, err)
	}
}

func TestShardErrors(t *testing.T) {
	for _, c := range []struct{ yaml, field, msg string }{
		{"shards:\n  train: [a]\n  infer: [b, a]\n", "shards.infer[1]", `pool "a" is already in a shard (shards.train[0])`},
		{"shards:\n  train: [a, a]\n", "shards.train[1]", "already in a shard"},
		{"shards:\n  Bad!: [a]\n", "shards.Bad!", "is not a shard name"},
		{"shards:\n  train: a\n", "shards.train", "list"},
		{"shards:\n  train: [\"\"]\n", "shards.train[0]", "empty"},
	} {
		_, err := Parse("p.yaml", []byte("version: gpugov.policy/v1\n"+c.yaml))
		var pe *Error
		if !errors.As(err, &pe) {
			t.Fatalf("%q: error %v, want a policy error", c.yaml, err)
		}
		found := false
		for _, pr := range pe.Problems {
			if pr.Field == c.field && strings.Contains(pr.Message, c.msg) {
				found = true
			}
		}
		if !found {
			t.Errorf("%q: problems %+v, want %s: …%s…", c.yaml, pe.Problems, c.field, c.msg)
		}
	}
}
