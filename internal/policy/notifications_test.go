package policy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const notifyV = "version: gpugov.policy/v1\n"

func TestNotificationsSection(t *testing.T) {
	p, err := Parse("p.yaml", []byte(notifyV+`notifications:
  webhooks:
    - {project: vision, url: "https://hooks.example/gpugov", secret_env: VISION_HOOK_SECRET}
    - {project: nlp, url: "http://127.0.0.1:9000/hook", secret_file: /run/secrets/nlp}
  delivery: {max_attempts: 3, initial_interval_s: 0.5, max_interval_s: 2, timeout_s: 4, poll_interval_s: 1, retention_s: 3600}
`))
	if err != nil {
		t.Fatal(err)
	}
	n := p.Notifications
	if w, ok := n.Webhook("vision"); !ok || w.URL != "https://hooks.example/gpugov" || w.SecretEnv != "VISION_HOOK_SECRET" {
		t.Fatalf("vision webhook = %+v, %v", w, ok)
	}
	if _, ok := n.Webhook("drill"); ok {
		t.Fatal("drill has no webhook")
	}
	if got := strings.Join(n.Projects(), ","); got != "vision,nlp" {
		t.Fatalf("Projects = %s", got)
	}
	want := Delivery{MaxAttempts: 3, InitialIntervalSeconds: 0.5, MaxIntervalSeconds: 2, TimeoutSeconds: 4, PollIntervalSeconds: 1, RetentionSeconds: 3600}
	if n.Delivery != want {
		t.Fatalf("delivery = %+v, want %+v", n.Delivery, want)
	}
	if d := Default().Notifications; len(d.Webhooks) != 0 || d.Delivery != DefaultDelivery() {
		t.Fatalf("default notifications = %+v", d)
	}
	// The webhook is part of the policy version; its secret's value is not.
	q, _ := Parse("p.yaml", []byte(notifyV+"notifications:\n  webhooks:\n    - {project: vision, url: \"https://other.example/\", secret_env: VISION_HOOK_SECRET}\n"))
	r, _ := Parse("p.yaml", []byte(notifyV+"notifications:\n  webhooks:\n    - {project: vision, url: \"https://other.example/\", secret_env: VISION_HOOK_SECRET}\n"))
	if q.Hash() == p.Hash() || q.Hash() != r.Hash() {
		t.Fatal("a different webhook must change the hash, the same one must not")
	}
}

// TestAdminsWebhook: notifications.admins is the admins' recipient's
// webhook, listed after the projects; a policy without it hashes as before.
func TestAdminsWebhook(t *testing.T) {
	p, err := Parse("p.yaml", []byte(notifyV+`notifications:
  webhooks:
    - {project: vision, url: "https://hooks.example/gpugov", secret_env: VISION_HOOK_SECRET}
  admins: {url: "https://ops.example/gpugov", secret_file: /run/secrets/admins}
`))
	if err != nil {
		t.Fatal(err)
	}
	n := p.Notifications
	w, ok := n.Webhook(AdminsRecipient)
	if !ok || w.URL != "https://ops.example/gpugov" || w.SecretFile != "/run/secrets/admins" || w.Project != AdminsRecipient {
		t.Fatalf("admins webhook = %+v, %v", w, ok)
	}
	if got := strings.Join(n.Projects(), ","); got != "vision,"+AdminsRecipient {
		t.Fatalf("Projects = %s", got)
	}
	back, err := FromCanonical(p.Canonical())
	if err != nil || back.Hash() != p.Hash() || back.Notifications.Admins == nil {
		t.Fatalf("canonical round trip: %+v, %v", back, err)
	}
	if _, ok := Default().Notifications.Webhook(AdminsRecipient); ok {
		t.Fatal("the default policy has no admins webhook")
	}
	if strings.Contains(string(Default().Canonical()), "admins") {
		t.Fatal("a policy without notifications.admins writes it in its canonical JSON (its hash would change)")
	}
	for _, tc := range []struct{ name, yaml, want string }{
		{"admins without url", "  admins: {secret_env: A}\n", "p.yaml:3: notifications.admins.url: is required"},
		{"admins without secret", "  admins: {url: \"https://h/\"}\n",
			"p.yaml:3: notifications.admins.secret_env: exactly one of secret_env and secret_file is required"},
		{"admins literal secret", "  admins: {url: \"https://h/\", secret: hunter2}\n",
			"p.yaml:3: notifications.admins.secret: a literal secret is refused"},
		{"admins with project", "  admins: {project: ops, url: \"https://h/\", secret_env: A}\n",
			"p.yaml:3: notifications.admins.project: unknown field"},
		{"reserved project", "  webhooks:\n    - {project: " + AdminsRecipient + ", url: \"https://h/\", secret_env: A}\n",
			`p.yaml:4: notifications.webhooks[0].project: "gpugov/admins" is reserved for the admins' webhook`},
	} {
		_, err := Parse("p.yaml", []byte(notifyV+"notifications:\n"+tc.yaml))
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: error\n  %v\nwant the prefix\n  %q", tc.name, err, tc.want)
		}
	}
}

func TestNotificationsErrors(t *testing.T) {
	cases := []struct{ name, yaml, want string }{
		{"literal secret", "  webhooks:\n    - {project: a, url: \"https://h/\", secret: hunter2}\n",
			"p.yaml:4: notifications.webhooks[0].secret: a literal secret is refused"},
		{"no secret source", "  webhooks:\n    - {project: a, url: \"https://h/\"}\n",
			"p.yaml:4: notifications.webhooks[0].secret_env: exactly one of secret_env and secret_file is required"},
		{"two secret sources", "  webhooks:\n    - {project: a, url: \"https://h/\", secret_env: A, secret_file: /a}\n",
			"p.yaml:4: notifications.webhooks[0].secret_env: exactly one of"},
		{"no url", "  webhooks:\n    - {project: a, secret_env: A}\n", "p.yaml:4: notifications.webhooks[0].url: is required"},
		{"bad scheme", "  webhooks:\n    - {project: a, url: \"ftp://h/\", secret_env: A}\n",
			`p.yaml:4: notifications.webhooks[0].url: "ftp://h/": want an http or https URL`},
		{"no host", "  webhooks:\n    - {project: a, url: \"https:///x\", secret_env: A}\n", `p.yaml:4: notifications.webhooks[0].url: "https:///x" has no host`},
		{"credentials in url", "  webhooks:\n    - {project: a, url: \"https://u:pw@h/\", secret_env: A}\n",
			"p.yaml:4: notifications.webhooks[0].url: must not carry credentials"},
		{"repeated project", "  webhooks:\n    - {project: a, url: \"https://h/\", secret_env: A}\n    - {project: a, url: \"https://i/\", secret_env: B}\n",
			`p.yaml:5: notifications.webhooks[1].project: "a" repeats notifications.webhooks[0]`},
		{"zero attempts", "  delivery: {max_attempts: 0}\n", "p.yaml:3: notifications.delivery.max_attempts: 0, want at least 1"},
		{"intervals", "  delivery: {initial_interval_s: 10, max_interval_s: 5}\n", "p.yaml:3: notifications.delivery.max_interval_s: 5 is below initial_interval_s (10)"},
		{"unknown field", "  retries: 3\n", "p.yaml:3: notifications.retries: unknown field"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("p.yaml", []byte(notifyV+"notifications:\n"+tc.yaml))
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("error\n  %v\nwant the prefix\n  %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), ":pw@") {
				t.Fatalf("the error echoes the secret: %v", err)
			}
		})
	}
}

func TestWebhookSecret(t *testing.T) {
	t.Setenv("GPUGOV_TEST_HOOK", "from-env")
	if s, err := (Webhook{Project: "a", SecretEnv: "GPUGOV_TEST_HOOK"}).Secret(); err != nil || string(s) != "from-env" {
		t.Fatalf("env secret = %q, %v", s, err)
	}
	f := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(f, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := (Webhook{Project: "a", SecretFile: f}).Secret(); err != nil || string(s) != "from-file" {
		t.Fatalf("file secret = %q, %v", s, err)
	}
	if _, err := (Webhook{Project: "a", SecretEnv: "GPUGOV_TEST_HOOK_UNSET"}).Secret(); !errors.Is(err, ErrNoSecret) ||
		!strings.Contains(err.Error(), "GPUGOV_TEST_HOOK_UNSET") {
		t.Fatalf("unset env: %v", err)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := (Webhook{Project: "a", SecretFile: empty}).Secret(); !errors.Is(err, ErrNoSecret) {
		t.Fatalf("empty file: %v", err)
	}
	if _, err := (Webhook{Project: "a", SecretFile: filepath.Join(t.TempDir(), "missing")}).Secret(); err == nil {
		t.Fatal("missing file: no error")
	}
}
