// Package dedupe extracts the key that identifies a provider's retries of
// one event. Node-scope storage of keys lives in the queue's writer (the
// dedupe rows ride in the hook's own batch); this package only decides what
// the key is.
package dedupe

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

// MaxKeyBytes: a longer key is stored as "sha256:<hex>", so a provider
// cannot make dedupe rows arbitrarily large.
const MaxKeyBytes = 200

// presetHeaders maps a preset to the headers that carry its event id, the
// first present one wins. svix and standard_webhooks read both names, as
// their verify types do (a Svix sender may use either set).
// stripe has no header: its event id is the JSON body's "id".
var presetHeaders = map[string][]string{
	"github":            {"X-GitHub-Delivery"},
	"standard_webhooks": {"Webhook-Id", "Svix-Id"},
	"svix":              {"Svix-Id", "Webhook-Id"},
	"shopify":           {"X-Shopify-Webhook-Id"},
	// Twilio: the same token on every retry of one webhook.
	"twilio": {"I-Twilio-Idempotency-Token"},
	"linear": {"Linear-Delivery"},
	// GitLab 17.4+ sends Idempotency-Key, the same on retries; older
	// versions only the event UUID.
	"gitlab": {"Idempotency-Key", "X-Gitlab-Event-UUID"},
}

// presetJSON maps a preset to the dotted JSON path of its event id.
var presetJSON = map[string]string{
	"stripe":    "id",
	"slack":     "event_id", // Events API event_callback
	"discord":   "id",       // the interaction id
	"paddle":    "event_id", // Paddle Billing notifications
	"square":    "event_id", // Square webhook events
	"intercom":  "id",       // notification_event id
	"pagerduty": "event.id", // v3 webhooks
	"mailgun":   "event-data.id",
}

// Extractor finds one source's dedupe key.
type Extractor struct {
	headers []string // canonical header names, first present wins; or nil
	path    []string // JSON path, or nil
	ttl     time.Duration
}

// Options is one source's dedupe: where its key is. At most one of Preset,
// Header and JSON is used, in that order; config validates that exactly one
// is set and that a preset is known (HasPreset).
type Options struct {
	// Preset names a provider whose event id header or JSON field is known
	// (github, stripe, …).
	Preset string
	// Header is the request header that carries the key, any case.
	Header string
	// JSON is the dotted path of the key in a JSON body ("data.id").
	JSON string
	// TTL is how long a key dedupes.
	TTL time.Duration
}

// New builds the extractor of a source; nil options mean no dedupe. It
// never fails: an unknown preset yields an extractor that finds no key.
func New(c *Options) *Extractor {
	if c == nil {
		return nil
	}
	e := &Extractor{ttl: c.TTL}
	switch {
	case c.Preset != "":
		if hs, ok := presetHeaders[c.Preset]; ok {
			for _, h := range hs {
				e.headers = append(e.headers, http.CanonicalHeaderKey(h))
			}
		} else if p, ok := presetJSON[c.Preset]; ok {
			e.path = strings.Split(p, ".")
		}
	case c.Header != "":
		e.headers = []string{http.CanonicalHeaderKey(c.Header)}
	case c.JSON != "":
		e.path = strings.Split(c.JSON, ".")
	}
	return e
}

// TTL is how long a key dedupes.
func (e *Extractor) TTL() time.Duration { return e.ttl }

// Key returns the dedupe key of a request, or "" when the request carries
// none (such a hook is stored without dedupe, never refused: a missing id
// must not cost a real hook).
func (e *Extractor) Key(h http.Header, body []byte) string {
	if e == nil {
		return ""
	}
	var k string
	if e.headers != nil {
		for _, name := range e.headers {
			if k = strings.TrimSpace(h.Get(name)); k != "" {
				break
			}
		}
	} else if e.path != nil {
		k = jsonKey(body, e.path)
	}
	return Normalize(k)
}

// Normalize hashes keys longer than MaxKeyBytes.
func Normalize(k string) string {
	if len(k) <= MaxKeyBytes {
		return k
	}
	sum := sha256.Sum256([]byte(k))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// jsonKey walks path through a JSON object; strings are used as is, numbers
// by their literal text, anything else (object, array, bool, null, absent)
// yields no key.
func jsonKey(body []byte, path []string) string {
	var cur json.RawMessage = body
	for _, p := range path {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(cur, &obj); err != nil {
			return ""
		}
		v, ok := obj[p]
		if !ok {
			return ""
		}
		cur = v
	}
	var s string
	if err := json.Unmarshal(cur, &s); err == nil {
		return s
	}
	var n json.Number
	if err := json.Unmarshal(cur, &n); err == nil {
		return n.String()
	}
	return ""
}

// HasPreset reports whether name is a known preset.
func HasPreset(name string) bool {
	_, h := presetHeaders[name]
	_, j := presetJSON[name]
	return h || j
}
