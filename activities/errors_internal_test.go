package activities

import (
	"errors"
	"fmt"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/gpugov/gpugov/store"
)

// TestNonRetryableClassifiesStoreErrors checks that the store errors a retry
// cannot fix become non-retryable application errors of the right type, and
// that any other error stays retryable.
func TestNonRetryableClassifiesStoreErrors(t *testing.T) {
	cases := []struct {
		err      error
		wantType string // "" means the error must pass through unchanged
	}{
		{fmt.Errorf("job j-1: %w", store.ErrNotFound), ErrTypeNotFound},
		{fmt.Errorf("allocation a-1: %w", store.ErrConflict), ErrTypeConflict},
		{&store.ValidationError{Field: "queue", Message: `queue "nope" does not exist`}, ErrTypeInvalidInput},
		{errors.New("connection refused"), ""},
	}
	for _, c := range cases {
		got := nonRetryable(c.err)
		var appErr *temporal.ApplicationError
		if c.wantType == "" {
			if got != c.err {
				t.Errorf("nonRetryable(%v) = %v, want the error unchanged (retryable)", c.err, got)
			}
			continue
		}
		if !errors.As(got, &appErr) || !appErr.NonRetryable() || appErr.Type() != c.wantType {
			t.Errorf("nonRetryable(%v) = %#v, want a non-retryable application error of type %s", c.err, got, c.wantType)
		}
	}
	if nonRetryable(nil) != nil {
		t.Error("nonRetryable(nil) is not nil")
	}
}
