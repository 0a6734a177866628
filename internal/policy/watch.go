package policy

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"
)

// DefaultPollInterval is how often a Watcher checks the file's modification
// time and size (fsnotify is not a dependency; a few seconds of delay is
// fine for rules that change by hand).
const DefaultPollInterval = 3 * time.Second

// Change is one policy change a Watcher applied, for the policy versions
// and the audit log.
type Change struct {
	Path string
	Old  *Policy
	New  *Policy
	At   time.Time
}

// Watcher holds the current policy of one file and re-reads it when the
// file changes. A file that no longer loads (invalid, unreadable) leaves the
// previous policy in force and is reported to OnError.
type Watcher struct {
	// Path is the policy file.
	Path string
	// Interval is the poll period; 0 means DefaultPollInterval.
	Interval time.Duration
	// OnChange is called when a changed file loaded to a new policy, before
	// it is made current (store and activate its version, write the pool
	// stages to the store). Its error is passed to OnError; the new policy
	// becomes current all the same.
	OnChange func(ctx context.Context, c Change) error
	// OnError receives load failures and OnChange errors; nil ignores them.
	OnError func(error)

	mu      sync.RWMutex
	current *Policy
	modTime time.Time
	size    int64
}

// NewWatcher loads path once and returns a Watcher holding it. It returns
// Load's error when the initial file is invalid: a service must not start
// on rules it cannot read.
func NewWatcher(path string) (*Watcher, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("policy file: %w", err)
	}
	cfg, err := Load(path)
	if err != nil {
		return nil, err
	}
	return &Watcher{Path: path, current: cfg, modTime: st.ModTime(), size: st.Size()}, nil
}

// Current returns the policy in force; callers must not modify it.
func (w *Watcher) Current() *Policy {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.current
}

// Run polls the file every Interval until ctx ends.
func (w *Watcher) Run(ctx context.Context) {
	iv := w.Interval
	if iv <= 0 {
		iv = DefaultPollInterval
	}
	t := time.NewTicker(iv)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.Check(ctx)
		}
	}
}

// Check re-reads the file if its modification time or size changed since
// the last read and reports whether a new policy became current. A file
// that loads to the same policy (Hash) as the current one counts as
// unchanged and calls no OnChange. A changed policy is handed to OnChange
// first and made current only when it succeeds, so that what reads Current
// (the scheduling cycle, which records the hash) sees a version OnChange has
// stored; when OnChange fails (e.g. PostgreSQL unreachable) the previous
// policy stays current and the next Check tries the same file again.
func (w *Watcher) Check(ctx context.Context) bool {
	st, err := os.Stat(w.Path)
	if err != nil {
		w.fail(fmt.Errorf("policy file: %w (keeping the previous policy)", err))
		return false
	}
	w.mu.Lock()
	same := st.ModTime().Equal(w.modTime) && st.Size() == w.size
	w.modTime, w.size = st.ModTime(), st.Size()
	old := w.current
	w.mu.Unlock()
	if same {
		return false
	}
	p, err := Load(w.Path)
	if err != nil {
		w.fail(fmt.Errorf("%w (keeping the previous policy)", err))
		return false
	}
	if p.Hash() == old.Hash() {
		return false
	}
	if w.OnChange != nil {
		if err := w.OnChange(ctx, Change{Path: w.Path, Old: old, New: p, At: time.Now()}); err != nil {
			w.fail(fmt.Errorf("policy change: %w (keeping the previous policy; retried at the next check)", err))
			w.mu.Lock()
			w.modTime, w.size = time.Time{}, -1 // the next Check reads the file again
			w.mu.Unlock()
			return false
		}
	}
	w.mu.Lock()
	w.current = p
	w.mu.Unlock()
	return true
}

func (w *Watcher) fail(err error) {
	if w.OnError != nil {
		w.OnError(err)
	}
}
