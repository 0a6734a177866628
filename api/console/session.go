package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/store"
)

// Cookie names. The session cookie's path is /ui/, so the API under /v1
// never sees it (the API authenticates bearer tokens only).
const (
	SessionCookie = "gpugov_session"
	// SignInCookie carries the sign-in form's CSRF value (double submit):
	// without it another site could sign a browser in as the attacker.
	SignInCookie = "gpugov_signin"
)

// csrfLabel is the message of the CSRF HMAC, keyed by the session ID.
const csrfLabel = "gpugov console csrf v1"

// session is a signed-in viewer: the token the pages act as and its principal.
type session struct {
	idDigest  [sha256.Size]byte
	token     api.TokenDigest
	principal api.Principal
	csrf      string
}

// randomID returns 32 bytes from crypto/rand in unpadded base64url.
func randomID() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// csrfToken is the CSRF token of session ID id: HMAC-SHA256 keyed by the ID
// (which only the browser's HttpOnly cookie holds), so it is bound to the
// session and needs no storage.
func csrfToken(id string) string {
	m := hmac.New(sha256.New, []byte(id))
	m.Write([]byte(csrfLabel))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// secure reports whether cookies of r get the Secure flag.
func (c *Console) secure(r *http.Request) bool { return r.TLS != nil || c.opts.SecureCookies }

// setCookie sets an HttpOnly, SameSite=Strict cookie under /ui/ (Secure
// under TLS); maxAge < 0 deletes it.
func (c *Console) setCookie(w http.ResponseWriter, r *http.Request, name, value, path string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: path, MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: c.secure(r)})
}

// loadSession returns the request's session, or nil when it has none or
// the session expired, or its token was revoked (its row is then deleted).
func (c *Console) loadSession(r *http.Request) (*session, error) {
	ck, err := r.Cookie(SessionCookie)
	if err != nil || ck.Value == "" || len(ck.Value) > 64 {
		return nil, nil
	}
	s := &session{idDigest: sha256.Sum256([]byte(ck.Value)), csrf: csrfToken(ck.Value)}
	row, err := c.store.LookupConsoleSession(r.Context(), s.idDigest[:], c.opts.Now())
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	copy(s.token[:], row.TokenDigest)
	p, found, err := c.api.LookupPrincipal(r.Context(), s.token)
	if err != nil {
		return nil, err
	}
	if !found { // revoked since the sign-in
		return nil, c.store.DeleteConsoleSession(r.Context(), s.idDigest[:])
	}
	s.principal = p
	return s, nil
}

// withSession runs h with the request's session. Without one a page
// redirects to the sign-in form, a fragment or a form post answers 401.
// A POST must carry the session's CSRF token (form field csrf): 403 otherwise,
// before anything is done.
func (c *Console) withSession(h func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		s, err := c.loadSession(r)
		if err != nil {
			c.errorPage(w, r, nil, http.StatusServiceUnavailable, "the session store cannot be read: "+err.Error())
			return
		}
		if s == nil {
			if r.Method == http.MethodGet && !strings.HasPrefix(r.URL.Path, "/ui/fragment/") {
				http.Redirect(w, r, "/ui/sign-in?next="+queryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			c.setCookie(w, r, SessionCookie, "", "/ui/", -1)
			c.errorPage(w, r, nil, http.StatusUnauthorized, "not signed in, or the session ended: sign in again")
			return
		}
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, MaxFormBytes)
			if err := r.ParseForm(); err != nil {
				c.errorPage(w, r, s, http.StatusBadRequest, "unreadable form: "+err.Error())
				return
			}
			if subtle.ConstantTimeCompare([]byte(r.PostForm.Get("csrf")), []byte(s.csrf)) != 1 {
				c.errorPage(w, r, s, http.StatusForbidden, "missing or wrong CSRF token (field csrf): reload the page and try again")
				return
			}
		}
		h(w, r, s)
	}
}

// signInData is the sign-in page's data.
type signInData struct {
	CSRF    string
	Next    string
	Message string
}

// signInForm serves GET /ui/sign-in: the token form, with a fresh sign-in
// CSRF value in a cookie and in the form.
func (c *Console) signInForm(w http.ResponseWriter, r *http.Request) {
	c.renderSignIn(w, r, http.StatusOK, "")
}

func (c *Console) renderSignIn(w http.ResponseWriter, r *http.Request, status int, msg string) {
	v, err := randomID()
	if err != nil {
		c.errorPage(w, r, nil, http.StatusInternalServerError, err.Error())
		return
	}
	c.setCookie(w, r, SignInCookie, v, "/ui/sign-in", 600)
	w.Header().Set("Cache-Control", "no-store")
	c.render(w, r, status, "sign-in", &page{Title: "Sign in", D: signInData{CSRF: v, Next: safeNext(r.FormValue("next")), Message: msg}})
}

// safeNext keeps a post-sign-in redirect inside the console.
func safeNext(next string) string {
	if strings.HasPrefix(next, "/ui/") && !strings.HasPrefix(next, "//") && !strings.ContainsAny(next, "\\\r\n") {
		return next
	}
	return "/ui/overview"
}

// signIn serves POST /ui/sign-in: it checks the sign-in CSRF value, asks
// the API whether the token is valid (through ServeAs, so unknown tokens
// count against the client's guesses as on the API), stores the session
// and sets its cookie.
func (c *Console) signIn(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, MaxFormBytes)
	if err := r.ParseForm(); err != nil {
		c.renderSignIn(w, r, http.StatusBadRequest, "unreadable form")
		return
	}
	ck, err := r.Cookie(SignInCookie)
	if err != nil || ck.Value == "" || subtle.ConstantTimeCompare([]byte(ck.Value), []byte(r.PostForm.Get("csrf"))) != 1 {
		c.renderSignIn(w, r, http.StatusForbidden, "the sign-in form expired or came from elsewhere (CSRF check): try again")
		return
	}
	token := strings.TrimSpace(r.PostForm.Get("token"))
	if token == "" {
		c.renderSignIn(w, r, http.StatusBadRequest, "token is required")
		return
	}
	probe := &session{token: api.DigestToken(token)}
	if err := c.call(r, probe, http.MethodGet, "/v1/queues", nil, nil, nil); err != nil {
		var f *apiFailure
		if errors.As(err, &f) && f.Status < 500 {
			c.renderSignIn(w, r, f.Status, "sign-in refused: "+f.Body.Message)
			return
		}
		c.errorPage(w, r, nil, http.StatusServiceUnavailable, err.Error())
		return
	}
	p, found, err := c.api.LookupPrincipal(r.Context(), probe.token)
	if err != nil || !found {
		c.renderSignIn(w, r, http.StatusUnauthorized, "sign-in refused: unknown token")
		return
	}
	if p.Role == "agent" {
		c.renderSignIn(w, r, http.StatusForbidden, "an agent token cannot sign in to the console: use a submitter, operator or admin token")
		return
	}
	id, err := randomID()
	if err != nil {
		c.errorPage(w, r, nil, http.StatusInternalServerError, err.Error())
		return
	}
	now := c.opts.Now()
	d := sha256.Sum256([]byte(id))
	if err := c.store.CreateConsoleSession(r.Context(), store.ConsoleSession{IDDigest: d[:], TokenDigest: probe.token[:],
		CreatedAt: now, ExpiresAt: now.Add(SessionTTL)}); err != nil {
		c.errorPage(w, r, nil, http.StatusServiceUnavailable, err.Error())
		return
	}
	c.setCookie(w, r, SignInCookie, "", "/ui/sign-in", -1)
	c.setCookie(w, r, SessionCookie, id, "/ui/", int(SessionTTL.Seconds()))
	http.Redirect(w, r, safeNext(r.PostForm.Get("next")), http.StatusSeeOther)
}

// signOut serves POST /ui/sign-out: the session's row is deleted and its
// cookie cleared.
func (c *Console) signOut(w http.ResponseWriter, r *http.Request, s *session) {
	if err := c.store.DeleteConsoleSession(r.Context(), s.idDigest[:]); err != nil {
		c.errorPage(w, r, s, http.StatusServiceUnavailable, err.Error())
		return
	}
	c.setCookie(w, r, SessionCookie, "", "/ui/", -1)
	http.Redirect(w, r, "/ui/sign-in", http.StatusSeeOther)
}
