package edge

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"time"

	"github.com/ankusa/ankusa/internal/verify"
)

// HandshakeObserver is an optional ability of an Observer: it counts the
// provider handshakes the edge answers (ankusa_ingest_handshakes_total).
// sourceID is a configured source id and provider one of the Handshake
// providers, never request input.
type HandshakeObserver interface {
	Handshake(sourceID, provider string)
}

// Handshake providers (Handshake.Provider), each a provider's check that an
// endpoint is theirs before they send it anything. A handshake is answered
// as the provider documents it and never stored or delivered:
//
//  1. slack (Events API url_verification, a signed POST): echo challenge;
//  2. zoom (endpoint.url_validation, a signed POST): plainToken and
//     encryptedToken = hex(HMAC-SHA256(secret token, plainToken));
//  3. meta (GET ?hub.mode=subscribe&hub.verify_token=…&hub.challenge=…):
//     echo the challenge when verify_token matches, else 403;
//  4. discord (interaction PING, type 1, Ed25519-signed POST): {"type":1};
//  5. msgraph (POST ?validationToken=…, unsigned): echo the token as
//     text/plain;
//  6. dropbox (GET ?challenge=…, unsigned): echo the challenge.
//
// A signed handshake is verified with the source's verifier first, and one
// that fails is answered 401 whatever on_verify_failure says: a forged
// handshake is worth nothing to keep, and Discord requires the 401. Echoes
// are text/plain with X-Content-Type-Options: nosniff, so a reflected value
// cannot be read as a page.
const (
	HandshakeSlack   = "slack"
	HandshakeZoom    = "zoom"
	HandshakeMeta    = "meta"
	HandshakeDiscord = "discord"
	HandshakeMSGraph = "msgraph"
	HandshakeDropbox = "dropbox"
)

// maxEcho bounds a value the edge echoes (a challenge or token). Providers
// send well under 1 KiB.
const maxEcho = 2048

// Handshake is the handshake one source answers.
type Handshake struct {
	Provider    string
	zoomKey     []byte // zoom: the newest secret token
	verifyToken string // meta: "" refuses every subscription GET
}

// HandshakeOptions are the settings of one source's provider handshake.
type HandshakeOptions struct {
	// Provider is one of the Handshake* providers; "" is none.
	Provider string
	// VerifyToken is meta's verify_token; "" refuses every subscription GET.
	VerifyToken string
	// ZoomSecret is zoom's newest secret token.
	ZoomSecret string
}

// NewHandshake is a source's handshake, nil for none.
func NewHandshake(o HandshakeOptions) *Handshake {
	if o.Provider == "" {
		return nil
	}
	hs := &Handshake{Provider: o.Provider, verifyToken: o.VerifyToken}
	if o.Provider == HandshakeZoom && o.ZoomSecret != "" {
		hs.zoomKey = []byte(o.ZoomSecret)
	}
	return hs
}

// get reports whether the handshake is a GET (meta, dropbox): only those
// sources answer GET on their catch URL.
func (hs *Handshake) get() bool {
	return hs != nil && (hs.Provider == HandshakeMeta || hs.Provider == HandshakeDropbox)
}

// serveGETHandshake answers a GET on the catch URL of src, whose handshake
// is a GET.
func (h *Handler) serveGETHandshake(w http.ResponseWriter, r *http.Request, start time.Time, src *Source) {
	q := r.URL.Query()
	switch src.Handshake.Provider {
	case HandshakeDropbox:
		c := q.Get("challenge")
		if c == "" || len(c) > maxEcho {
			h.reject(w, start, src.ID, http.StatusBadRequest, "", map[string]any{"error": "handshake_invalid"})
			return
		}
		h.echo(w, src, c)
	case HandshakeMeta:
		c, tok := q.Get("hub.challenge"), q.Get("hub.verify_token")
		if q.Get("hub.mode") != "subscribe" || c == "" || len(c) > maxEcho {
			h.reject(w, start, src.ID, http.StatusBadRequest, "", map[string]any{"error": "handshake_invalid"})
			return
		}
		if src.Handshake.verifyToken == "" || !equalToken(tok, src.Handshake.verifyToken) {
			h.reject(w, start, src.ID, http.StatusForbidden, "", map[string]any{"error": "handshake_refused"})
			return
		}
		h.echo(w, src, c)
	}
}

// postHandshake answers r if it is src's POST handshake and reports whether
// it did; body is the request's whole body.
func (h *Handler) postHandshake(w http.ResponseWriter, r *http.Request, start time.Time, src *Source, body []byte) bool {
	hs := src.Handshake
	switch hs.Provider {
	case HandshakeMSGraph:
		tok := r.URL.Query().Get("validationToken")
		if tok == "" {
			return false
		}
		if len(tok) > maxEcho {
			h.reject(w, start, src.ID, http.StatusBadRequest, "", map[string]any{"error": "handshake_invalid"})
			return true
		}
		h.echo(w, src, tok)
		return true

	case HandshakeSlack:
		if !bytes.Contains(body, []byte("url_verification")) {
			return false
		}
		var m struct{ Type, Challenge string }
		if json.Unmarshal(body, &m) != nil || m.Type != "url_verification" {
			return false
		}
		if !h.handshakeVerified(w, r, start, src, body) {
			return true
		}
		h.echo(w, src, m.Challenge)
		return true

	case HandshakeZoom:
		if !bytes.Contains(body, []byte("endpoint.url_validation")) {
			return false
		}
		var m struct {
			Event   string
			Payload struct {
				PlainToken string `json:"plainToken"`
			}
		}
		if json.Unmarshal(body, &m) != nil || m.Event != "endpoint.url_validation" {
			return false
		}
		if !h.handshakeVerified(w, r, start, src, body) {
			return true
		}
		mac := hmac.New(sha256.New, hs.zoomKey)
		mac.Write([]byte(m.Payload.PlainToken))
		h.answerJSON(w, src, map[string]string{
			"plainToken": m.Payload.PlainToken, "encryptedToken": hex.EncodeToString(mac.Sum(nil)),
		})
		return true

	case HandshakeDiscord:
		var m struct{ Type int }
		if json.Unmarshal(body, &m) != nil || m.Type != 1 {
			return false
		}
		if !h.handshakeVerified(w, r, start, src, body) {
			return true
		}
		h.answerJSON(w, src, map[string]int{"type": 1})
		return true
	}
	return false
}

// handshakeVerified checks a signed handshake with the source's verifier;
// on failure it answers 401 (whatever on_verify_failure says) and reports
// false.
func (h *Handler) handshakeVerified(w http.ResponseWriter, r *http.Request, start time.Time, src *Source, body []byte) bool {
	if src.Verifier == nil {
		return true
	}
	err := verifyRequest(src.Verifier, r, body, start)
	if err == nil {
		return true
	}
	h.reject(w, start, src.ID, http.StatusUnauthorized, "verification_failed",
		map[string]any{"error": "verification_failed", "reason": string(verify.ReasonOf(err))})
	return false
}

func (h *Handler) echo(w http.ResponseWriter, src *Source, v string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(v))
	h.countHandshake(src)
}

func (h *Handler) answerJSON(w http.ResponseWriter, src *Source, v any) {
	writeJSON(w, http.StatusOK, v)
	h.countHandshake(src)
}

func (h *Handler) countHandshake(src *Source) {
	if h.hso != nil {
		h.hso.Handshake(src.ID, src.Handshake.Provider)
	}
}

// equalToken compares in constant time (of the hashes, so the length does
// not show either).
func equalToken(got, want string) bool {
	a, b := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}
