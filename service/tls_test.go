package service

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/api"
	apiclient "github.com/gpugov/gpugov/api/client"
	"github.com/gpugov/gpugov/internal/temporalx/temporaltest"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// selfSigned writes a self-signed ECDSA certificate for 127.0.0.1 and its
// key as PEM files in dir and returns their paths.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "gpugov-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// TestServiceTLSAndStoredTokens: with a TLS certificate the API answers
// HTTPS only; the CLI's client trusting the certificate (TrustCA, as
// --ca-cert does) calls it with a token of the file and with one that
// `gpugov token create` stored in PostgreSQL, which a revocation ends at once.
func TestServiceTLSAndStoredTokens(t *testing.T) {
	dbURL := storetest.NewDatabase(t)
	dev := temporaltest.Start(t)
	tokens, err := api.NewTokens(map[string]api.Principal{"admin": {Project: "platform", Role: vocab.RoleAdmin}})
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := selfSigned(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	svc, err := Start(ctx, Config{DatabaseURL: dbURL, TemporalAddress: dev.HostPort, APIAddr: "127.0.0.1:0", Tokens: tokens,
		TLSCertFile: certFile, TLSKeyFile: keyFile, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close(context.Background())
	base := "https://" + svc.APIAddr()
	// Every connection timeout is set (a slow or idle client is cut off).
	if h := svc.httpSrv; h.ReadHeaderTimeout != APIReadHeaderTimeout || h.ReadTimeout != APIReadTimeout ||
		h.WriteTimeout != APIWriteTimeout || h.IdleTimeout != APIIdleTimeout {
		t.Fatalf("API server timeouts: header %s, read %s, write %s, idle %s", h.ReadHeaderTimeout, h.ReadTimeout, h.WriteTimeout, h.IdleTimeout)
	}

	// Plain HTTP to the TLS port is refused; an untrusting client fails the handshake.
	if resp, err := http.Get("http://" + svc.APIAddr() + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("plain HTTP served")
		}
	}
	untrusting, err := apiclient.New(base, "admin")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := untrusting.Queues(ctx); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a client not trusting the certificate: %v, want a certificate error", err)
	}
	c, err := apiclient.New(base, "admin")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.TrustCA(certFile); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Queues(ctx); err != nil {
		t.Fatalf("HTTPS with the file's token: %v", err)
	}
	if err := c.TrustCA(keyFile); err == nil {
		t.Fatal("a key file was taken as a CA certificate")
	}

	tok, err := api.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	d := api.DigestToken(tok)
	row, err := svc.Store().CreateAPIToken(ctx, store.APIToken{Digest: d[:], Name: "ops-2", Project: "platform", Role: "operator"}, "test")
	if err != nil {
		t.Fatal(err)
	}
	stored, err := apiclient.New(base, tok)
	if err != nil {
		t.Fatal(err)
	}
	if err := stored.TrustCA(certFile); err != nil {
		t.Fatal(err)
	}
	if _, err := stored.Queues(ctx); err != nil {
		t.Fatalf("a stored token: %v", err)
	}
	browser := consoleSignIn(t, base, certFile, tok)
	if _, err := svc.Store().RevokeAPIToken(ctx, row.ID, "test", "rotated", time.Now()); err != nil {
		t.Fatal(err)
	}
	// The revocation ends the token's console session at its next page.
	if resp, err := browser.Get(base + "/ui/overview"); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/ui/sign-in") {
		t.Fatalf("console after the revocation: %d %q, want a redirect to sign in", resp.StatusCode, resp.Header.Get("Location"))
	}
	if _, err := stored.Queues(ctx); err == nil {
		t.Fatal("a revoked token was served")
	} else if e, ok := apiclient.AsError(err); !ok || e.Status != http.StatusUnauthorized {
		t.Fatalf("a revoked token: %v, want 401", err)
	}
}

// consoleSignIn signs in to the web console the service mounts at /ui/ over
// HTTPS with token and returns the browser-like client holding the session;
// the session cookie must carry Secure (TLS), HttpOnly and SameSite=Strict,
// and the overview must open.
func consoleSignIn(t *testing.T, base, caFile, token string) *http.Client {
	t.Helper()
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(base + "/ui/sign-in")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindSubmatch(body)
	if resp.StatusCode != http.StatusOK || m == nil {
		t.Fatalf("console sign-in form: %d %s", resp.StatusCode, body)
	}
	resp, err = c.PostForm(base+"/ui/sign-in", url.Values{"token": {token}, "csrf": {string(m[1])}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var session *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == "gpugov_session" {
			session = ck
		}
	}
	if resp.StatusCode != http.StatusSeeOther || session == nil || !session.Secure || !session.HttpOnly || session.SameSite != http.SameSiteStrictMode {
		t.Fatalf("console sign-in: %d, session cookie %+v, want 303 and a Secure, HttpOnly, SameSite=Strict cookie", resp.StatusCode, session)
	}
	if resp, err = c.Get(base + "/ui/overview"); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("console overview: %d", resp.StatusCode)
	}
	return c
}
