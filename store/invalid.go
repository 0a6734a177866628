package store

import (
	"errors"
	"fmt"
)

// ErrInvalid is matched (errors.Is) by every error a store method returns
// because its input is invalid — a required field empty, an unknown
// outcome, a report window the store does not read — before anything is
// written. The error is a *ValidationError naming the field; the API
// answers it with 422 invalid and the field.
var ErrInvalid = errors.New("invalid input")

// ValidationError is an input a store method refused. Field is the input's
// field in the method's own terms (e.g. "project", "outcome", "window.to",
// "pools[1].nodes[0].gpus[2].uuid"); Message says what is wrong, naming the
// field (e.g. "project is required"). It matches ErrInvalid with errors.Is.
type ValidationError struct {
	Field   string
	Message string
}

// Error returns the message.
func (e *ValidationError) Error() string { return e.Message }

// Is reports whether target is ErrInvalid.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }

// invalidf returns a *ValidationError for field with a formatted message.
func invalidf(field, format string, args ...any) error {
	return &ValidationError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// required returns a *ValidationError "<name> is required" for the first of
// the (name, value) pairs whose value is empty, or nil.
func required(pairs ...string) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i+1] == "" {
			return invalidf(pairs[i], "%s is required", pairs[i])
		}
	}
	return nil
}
