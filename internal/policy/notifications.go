package policy

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"gopkg.in/yaml.v3"
)

// Notifications is the submitter-notification section (docs/design.md §3,
// notifications): each project's webhook and how deliveries are retried.
// A project without a webhook gets no delivery: its notifications are
// marked unrouted and kept only to be read, until Retention prunes them.
type Notifications struct {
	// Webhooks are the projects' endpoints, at most one per project.
	Webhooks []Webhook `json:"webhooks"`
	// Admins is the admins' endpoint (`notifications.admins`: url and
	// secret_env or secret_file, no project): the notifications meant for
	// the service's admins, such as an experiment's automatic rollback
	// (experiment.rolled_back), are stored under the recipient
	// AdminsRecipient and delivered to it. nil: none is sent; those
	// notifications are marked unrouted, and the audit log and the
	// service's WARN log line carry the news.
	Admins   *Webhook `json:"admins,omitempty"`
	Delivery Delivery `json:"delivery"`
}

// AdminsRecipient is the recipient (the notifications row's project) of the
// notifications meant for the admins, delivered to Notifications.Admins. A
// project may not take the name: the loader refuses it in webhooks[].
const AdminsRecipient = "gpugov/admins"

// Webhook is one project's endpoint. The signing secret is never in the
// file (the policy's canonical JSON is stored in policy_versions): it is
// read at each delivery from the environment variable SecretEnv or the file
// SecretFile (exactly one is set), so a rotated secret needs no reload.
type Webhook struct {
	Project    string `json:"project"`
	URL        string `json:"url"` // http or https
	SecretEnv  string `json:"secret_env,omitempty"`
	SecretFile string `json:"secret_file,omitempty"`
}

// Delivery is the retry schedule of webhook deliveries (Temporal activity
// retries, docs/design.md §3): attempt n waits
// min(InitialIntervalSeconds × 2^(n-2), MaxIntervalSeconds) after attempt
// n-1; after MaxAttempts failed attempts the notification is dead-lettered
// with its last error.
type Delivery struct {
	MaxAttempts            int     `json:"max_attempts"`       // ≥ 1
	InitialIntervalSeconds float64 `json:"initial_interval_s"` // > 0
	MaxIntervalSeconds     float64 `json:"max_interval_s"`     // > 0
	// TimeoutSeconds bounds one HTTP attempt (connect to the end of the answer).
	TimeoutSeconds float64 `json:"timeout_s"`
	// PollIntervalSeconds is how often the dispatcher looks for pending
	// notifications: the longest a new notification waits before its
	// project's delivery starts.
	PollIntervalSeconds float64 `json:"poll_interval_s"`
	// RetentionSeconds is how long a final notification (delivered, dead,
	// unrouted) is kept after it became final.
	RetentionSeconds float64 `json:"retention_s"`
}

// Defaults of the delivery schedule.
const (
	DefaultNotifyMaxAttempts        = 8
	DefaultNotifyInitialIntervalS   = 1
	DefaultNotifyMaxIntervalS       = 60
	DefaultNotifyTimeoutS           = 10
	DefaultNotifyPollIntervalS      = 2
	DefaultNotificationRetentionS   = 7 * 24 * 3600
	literalSecretRefused            = "a literal secret is refused: the policy is stored in the database (policy_versions); name it with secret_env or secret_file"
	webhookSecretSourcesExactlyOnce = "exactly one of secret_env and secret_file is required"
)

// DefaultDelivery is the delivery schedule a file's absent fields take.
func DefaultDelivery() Delivery {
	return Delivery{MaxAttempts: DefaultNotifyMaxAttempts, InitialIntervalSeconds: DefaultNotifyInitialIntervalS,
		MaxIntervalSeconds: DefaultNotifyMaxIntervalS, TimeoutSeconds: DefaultNotifyTimeoutS,
		PollIntervalSeconds: DefaultNotifyPollIntervalS, RetentionSeconds: DefaultNotificationRetentionS}
}

// Webhook returns the webhook of project, or false when it has none; for
// AdminsRecipient it is Admins (with Project set to AdminsRecipient).
func (n *Notifications) Webhook(project string) (Webhook, bool) {
	if project == AdminsRecipient {
		if n.Admins == nil {
			return Webhook{}, false
		}
		w := *n.Admins
		w.Project = AdminsRecipient
		return w, true
	}
	for _, w := range n.Webhooks {
		if w.Project == project {
			return w, true
		}
	}
	return Webhook{}, false
}

// Projects lists the recipients that have a webhook: the projects, in file
// order, then AdminsRecipient when Admins is set.
func (n *Notifications) Projects() []string {
	out := make([]string, len(n.Webhooks), len(n.Webhooks)+1)
	for i, w := range n.Webhooks {
		out[i] = w.Project
	}
	if n.Admins != nil {
		out = append(out, AdminsRecipient)
	}
	return out
}

// ErrNoSecret is the error of a webhook whose secret source is unset or empty.
var ErrNoSecret = errors.New("webhook secret is not set")

// Secret reads the signing secret from the environment variable or the file
// (a trailing newline is dropped). Errors wrap ErrNoSecret when the variable
// is unset or either source is empty, or are the file's read error; they
// name the source, never the value.
func (w Webhook) Secret() ([]byte, error) {
	var s string
	switch {
	case w.SecretEnv != "":
		s = os.Getenv(w.SecretEnv)
		if s == "" {
			return nil, fmt.Errorf("project %s: environment variable %s: %w", w.Project, w.SecretEnv, ErrNoSecret)
		}
	case w.SecretFile != "":
		b, err := os.ReadFile(w.SecretFile)
		if err != nil {
			return nil, fmt.Errorf("project %s: secret file: %w", w.Project, err)
		}
		s = strings.TrimRight(string(b), "\r\n")
		if s == "" {
			return nil, fmt.Errorf("project %s: secret file %s is empty: %w", w.Project, w.SecretFile, ErrNoSecret)
		}
	default:
		return nil, fmt.Errorf("project %s: %w", w.Project, ErrNoSecret)
	}
	return []byte(s), nil
}

func (d *decoder) notifications(n *Notifications) fieldFunc {
	return func(node *yaml.Node, path string) {
		d.mapping(node, path, fields{
			"webhooks": d.webhooks(&n.Webhooks),
			"admins":   d.adminsWebhook(&n.Admins),
			"delivery": func(node *yaml.Node, path string) {
				dl := &n.Delivery
				d.mapping(node, path, fields{
					"max_attempts":       integer(d, &dl.MaxAttempts, count(1)),
					"initial_interval_s": number(d, &dl.InitialIntervalSeconds, positiveSeconds),
					"max_interval_s":     number(d, &dl.MaxIntervalSeconds, positiveSeconds),
					"timeout_s":          number(d, &dl.TimeoutSeconds, positiveSeconds),
					"poll_interval_s":    number(d, &dl.PollIntervalSeconds, positiveSeconds),
					"retention_s":        number(d, &dl.RetentionSeconds, positiveSeconds),
				})
				if dl.MaxIntervalSeconds < dl.InitialIntervalSeconds {
					d.fail(d.lineNode(path+".max_interval_s", node), path+".max_interval_s",
						"%v is below initial_interval_s (%v)", dl.MaxIntervalSeconds, dl.InitialIntervalSeconds)
				}
			},
		})
	}
}

func (d *decoder) webhooks(dst *[]Webhook) fieldFunc {
	return func(n *yaml.Node, path string) {
		out := []Webhook{}
		first := map[string]string{}
		d.list(n, path, func(c *yaml.Node, at string) {
			var w Webhook
			if !d.mapping(c, at, fields{
				"project":     d.name(&w.Project),
				"url":         d.webhookURL(&w.URL),
				"secret_env":  d.name(&w.SecretEnv),
				"secret_file": d.name(&w.SecretFile),
				// The value is never decoded, stored or echoed.
				"secret": func(v *yaml.Node, p string) { d.fail(v, p, literalSecretRefused) },
			}) {
				return
			}
			d.required(c, at, "project", "url")
			if d.has(at+".secret_env") == d.has(at+".secret_file") && !d.has(at+".secret") {
				d.fail(c, at+".secret_env", webhookSecretSourcesExactlyOnce)
			}
			if w.Project == AdminsRecipient {
				d.fail(d.lineNode(at+".project", c), at+".project", "%q is reserved for the admins' webhook (notifications.admins)", w.Project)
			} else if prev, ok := first[w.Project]; ok && w.Project != "" {
				d.fail(d.lineNode(at+".project", c), at+".project", "%q repeats %s", w.Project, prev)
			} else {
				first[w.Project] = at
			}
			out = append(out, w)
		})
		*dst = out
	}
}

// adminsWebhook decodes notifications.admins: url and exactly one of
// secret_env and secret_file, as a project's webhook without the project.
func (d *decoder) adminsWebhook(dst **Webhook) fieldFunc {
	return func(n *yaml.Node, path string) {
		var w Webhook
		if !d.mapping(n, path, fields{
			"url":         d.webhookURL(&w.URL),
			"secret_env":  d.name(&w.SecretEnv),
			"secret_file": d.name(&w.SecretFile),
			"secret":      func(v *yaml.Node, p string) { d.fail(v, p, literalSecretRefused) },
		}) {
			return
		}
		d.required(n, path, "url")
		if d.has(path+".secret_env") == d.has(path+".secret_file") && !d.has(path+".secret") {
			d.fail(n, path+".secret_env", webhookSecretSourcesExactlyOnce)
		}
		*dst = &w
	}
}

// webhookURL decodes an absolute http or https URL with a host.
func (d *decoder) webhookURL(dst *string) fieldFunc {
	return func(n *yaml.Node, path string) {
		if !d.scalar(n, path, "a URL", dst) {
			return
		}
		u, err := url.Parse(*dst)
		switch {
		case err != nil:
			d.fail(n, path, "is not a URL: %v", err)
		case u.Scheme != "http" && u.Scheme != "https":
			d.fail(n, path, "%q: want an http or https URL", *dst)
		case u.Host == "":
			d.fail(n, path, "%q has no host", *dst)
		case u.User != nil:
			d.fail(n, path, "must not carry credentials (they would be stored with the policy); sign with secret_env or secret_file")
		}
	}
}
