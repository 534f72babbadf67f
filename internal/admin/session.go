package admin

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"sync"
	"time"
)

// The console's login sessions. A browser cannot send a bearer token by
// itself, so the console trades a token for a session once (login form or
// GET /?token=) and the browser then sends the session in a cookie.
//
// The cookie holds a random session id, not the token nor its digest: a
// digest is what token_sha256 puts in the config file, and the file must not
// be enough to log in. Sessions live in memory only; a restart logs every
// console out, which costs a login and keeps no credential on disk.
//
// Invariants:
//  1. The map holds at most maxSessions entries: a new login past it evicts
//     the session closest to expiry, so logins cannot grow memory.
//  2. A session never outlives sessionTTL from its login, however busy.
//  3. Every mutating request carried by the cookie must also carry the
//     session's CSRF token in X-CSRF-Token (access.wrap checks it): the
//     cookie is SameSite=Strict already; the token keeps a browser that
//     ignores SameSite from being steered into a purge.
const (
	sessionCookie = "ankusa_session"
	csrfHeader    = "X-CSRF-Token"
	sessionTTL    = 12 * time.Hour
	maxSessions   = 1024
)

type session struct {
	cred    credential
	csrf    string
	expires time.Time
}

// sessions maps sha256(session id) to its session; the id itself is kept
// only by the browser, so a heap dump does not yield live cookies.
type sessions struct {
	mu  sync.Mutex
	m   map[[sha256.Size]byte]*session
	now func() time.Time
}

func newSessions(now func() time.Time) *sessions {
	return &sessions{m: map[[sha256.Size]byte]*session{}, now: now}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}

// create starts a session for cr and returns its id (the cookie value).
func (s *sessions) create(cr credential) (id string, sess *session) {
	id = randomHex(32)
	sess = &session{cred: cr, csrf: randomHex(32), expires: s.now().Add(sessionTTL)}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for k, v := range s.m {
		if !now.Before(v.expires) {
			delete(s.m, k)
		}
	}
	if len(s.m) >= maxSessions { // invariant 1
		var oldest [sha256.Size]byte
		var at time.Time
		for k, v := range s.m {
			if at.IsZero() || v.expires.Before(at) {
				oldest, at = k, v.expires
			}
		}
		delete(s.m, oldest)
	}
	s.m[sha256.Sum256([]byte(id))] = sess
	return id, sess
}

// lookup returns the live session the request's cookie names.
func (s *sessions) lookup(r *http.Request) (*session, bool) {
	c, err := r.Cookie(sessionCookie)
	if err != nil || c.Value == "" {
		return nil, false
	}
	k := sha256.Sum256([]byte(c.Value))
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, ok := s.m[k]
	if !ok {
		return nil, false
	}
	if !s.now().Before(sess.expires) { // invariant 2
		delete(s.m, k)
		return nil, false
	}
	return sess, true
}

// drop ends the request's session, if any.
func (s *sessions) drop(r *http.Request) {
	if c, err := r.Cookie(sessionCookie); err == nil {
		s.mu.Lock()
		delete(s.m, sha256.Sum256([]byte(c.Value)))
		s.mu.Unlock()
	}
}

// csrfOK reports whether r carries sess's CSRF token (invariant 3).
func (sess *session) csrfOK(r *http.Request) bool {
	got := r.Header.Get(csrfHeader)
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(sess.csrf)) == 1
}

func setSessionCookie(w http.ResponseWriter, r *http.Request, id string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: id, Path: "/", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
}
