package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"

	"github.com/gpugov/gpugov/store"
)

// Error codes of the API's error object. They are stable: clients branch on them.
const (
	CodeMalformed        = "malformed"          // 400: the body is not valid JSON of the right shape, or has unknown fields
	CodeInvalid          = "invalid"            // 422 (400 for an experiment spec, whose problems are all listed): well-formed but semantically invalid (the field says which)
	CodeUnauthorized     = "unauthorized"       // 401: no bearer token, or an unknown one
	CodeForbidden        = "forbidden"          // 403: the token's role or project does not allow the call
	CodeNotFound         = "not_found"          // 404: no such job or route
	CodeMethodNotAllowed = "method_not_allowed" // 405: the route exists for another method
	CodeConflict         = "conflict"           // 409: the job's state does not allow the action (e.g. cancel a finished job)
	CodeNotReady         = "not_ready"          // 422: a stage widening whose pool readiness failed (details list the failed checks)
	CodeStale            = "stale"              // 409: a checkpoint older than the run's current one; nothing changed
	CodeStoreUnavailable = "store_unavailable"  // 503: PostgreSQL could not be reached or did not answer in time; nothing was persisted
	CodeInternal         = "internal"           // 500: a bug or an unexpected database error
)

// FieldError is one problem with one field of a request.
type FieldError struct {
	Field   string `json:"field"`   // dotted path in the request, e.g. "resources.gpu_milli"
	Message string `json:"message"` // what is wrong and what is accepted
}

// ErrorBody is the error object every non-2xx answer carries:
// {"error": {"code", "message", "field"}}. Details lists every field error when
// validation found more than one; the first is repeated in Field and Message.
type ErrorBody struct {
	Code    string       `json:"code"`
	Message string       `json:"message"`
	Field   string       `json:"field,omitempty"`
	Details []FieldError `json:"details,omitempty"`
}

// ErrorResponse is the envelope of ErrorBody.
type ErrorResponse struct {
	Error ErrorBody `json:"error"`
}

// Error is an API failure with its HTTP status. Handlers return it; writeError
// renders it.
type Error struct {
	Status int
	Body   ErrorBody
}

// Error returns "field: message" (or just the message when no field is named),
// the form the CLI prints.
func (e *Error) Error() string {
	if e.Body.Field != "" {
		return e.Body.Field + ": " + e.Body.Message
	}
	return e.Body.Message
}

// newError builds an Error with a status, a code and a formatted message.
func newError(status int, code, field, format string, args ...any) *Error {
	return &Error{Status: status, Body: ErrorBody{Code: code, Field: field, Message: fmt.Sprintf(format, args...)}}
}

// invalid builds a 422 from one or more field errors; the first names the field.
func invalid(errs []FieldError) *Error {
	e := &Error{Status: http.StatusUnprocessableEntity, Body: ErrorBody{
		Code: CodeInvalid, Field: errs[0].Field, Message: errs[0].Message,
	}}
	if len(errs) > 1 {
		e.Body.Details = errs
	}
	return e
}

// writeError renders err as the JSON error object and aborts the gin chain.
// Errors that are not *Error are classified by storeError.
func writeError(c *gin.Context, err error) {
	var apiErr *Error
	if !errors.As(err, &apiErr) {
		apiErr = storeError(err)
	}
	if apiErr.Status >= 500 {
		_ = c.Error(err) // keeps the cause for logging middleware; never shown to the client
	}
	if apiErr.Status == http.StatusUnauthorized || apiErr.Status == http.StatusForbidden {
		c.Set(deniedKey, apiErr.Body.Message) // for the access_denied audit entry (denials.go)
	}
	c.AbortWithStatusJSON(apiErr.Status, ErrorResponse{Error: apiErr.Body})
}

// storeError maps an error from the store to an API error:
//   - store.ErrNotFound: 404 naming what was not found; store.ErrConflict: 409;
//   - store.ErrInvalid (a *store.ValidationError): 422 invalid naming the
//     field — the store refused the input before writing anything;
//   - the store could not be reached (unreachable): 503 store_unavailable,
//     so that a submission is never acknowledged unless it was persisted;
//   - a cancelled request: 499 (only the logs see it);
//   - anything else — a PostgreSQL error from a reachable server, a decode
//     failure, a bug: 500 internal with a generic message; writeError
//     attaches the cause, which logServerErrors logs.
func storeError(err error) *Error {
	var invalidInput *store.ValidationError
	switch {
	case errors.Is(err, store.ErrNotFound):
		// The store's message names what was looked for ("get job j-1:
		// not found", "reclaim r-2: not found"), without its package prefix.
		return newError(http.StatusNotFound, CodeNotFound, "", "%s", clip(strings.TrimPrefix(err.Error(), "store: "), maxEchoedMessage))
	case errors.Is(err, store.ErrConflict):
		return newError(http.StatusConflict, CodeConflict, "", "%s", conflictMessage(err))
	case errors.As(err, &invalidInput):
		return invalid([]FieldError{{Field: invalidInput.Field, Message: invalidInput.Message}})
	case unreachable(err):
		return newError(http.StatusServiceUnavailable, CodeStoreUnavailable, "", "the job store (PostgreSQL) is unreachable; nothing was changed, retry later")
	case errors.Is(err, context.Canceled):
		// The client went away; the status is not seen by anyone but the logs.
		return newError(499, CodeStoreUnavailable, "", "request cancelled")
	}
	return newError(http.StatusInternalServerError, CodeInternal, "", "internal error")
}

// maxEchoedID is how many bytes of a path's ID an error message quotes: a
// 5,000-character ID was echoed in full.
const maxEchoedID = 64

// maxEchoedMessage bounds a store message passed on in a 404 or 409, which
// may quote an ID from the path.
const maxEchoedMessage = 300

// jobLookupError is the answer to a failed GetJob of the path's job id: a
// 404 `job "ID" not found` naming id, the ID clipped to maxEchoedID bytes
// (the store's "get job ID: not found" spoke of its operation), else err.
func jobLookupError(id string, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return newError(http.StatusNotFound, CodeNotFound, "id", "job %q not found", clip(id, maxEchoedID))
	}
	return err
}

// conflictMessage is what a conflict tells the caller: the store's reason
// ("job is running; only a submitted or waiting job can be held") without
// the store's operation prefix ("store: set hold on j-…: ", added by its
// transaction wrapper) or the sentinel's own text at the end.
func conflictMessage(err error) string {
	msg := strings.TrimSuffix(err.Error(), ": "+store.ErrConflict.Error())
	// Every "store: op: " prefix goes, the nested ones too ("store: open
	// drill: store: open drill of j-…: job is submitted…" kept the second).
	for {
		rest, ok := strings.CutPrefix(msg, "store: ")
		if !ok {
			break
		}
		_, reason, found := strings.Cut(rest, ": ")
		if !found || reason == "" {
			break
		}
		msg = reason
	}
	return clip(msg, maxEchoedMessage)
}

// unreachable reports whether err means PostgreSQL could not be reached or
// did not answer in time: a failed connect (*pgconn.ConnectError), a closed
// pool, a connection that broke or closed under a query (network errors,
// EOF, pgconn.ErrConnClosed), a deadline that expired while talking to it
// (the request's store timeout), or a SQLSTATE meaning "try again later"
// (unavailableSQLState).
func unreachable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return unavailableSQLState(pgErr.Code)
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connectErr) || errors.As(err, &netErr) || pgconn.Timeout(err) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, puddle.ErrClosedPool) ||
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// unavailableSQLState reports whether a SQLSTATE means "try again later":
// class 08 (connection exception), 53 (insufficient resources), 57P0x
// (operator intervention: shutdown, cannot connect now).
func unavailableSQLState(code string) bool {
	if len(code) < 2 {
		return false
	}
	switch code[:2] {
	case "08", "53":
		return true
	case "57":
		return len(code) == 5 && code[:4] == "57P0"
	}
	return false
}
