package verify

import (
	"net/http"
	"time"
)

// Svix sends the Standard Webhooks scheme under its own header names
// (svix-id, svix-timestamp, svix-signature), and its libraries verify those
// or, when one of them is missing, the webhook-* names. Both types accept
// both sets, so a source works whichever names the sender uses; they differ
// only in which set is read first when a request carries both.
//
// The scheme itself stays one preset of the engine per header set; headerSet
// only picks which one answers.

// svixHeaders and webhookHeaders are the two header sets, canonical.
var (
	svixHeaders    = [3]string{"Svix-Id", "Svix-Timestamp", "Svix-Signature"}
	webhookHeaders = [3]string{"Webhook-Id", "Webhook-Timestamp", "Webhook-Signature"}
)

// headerSet answers with primary when the request carries all of primary's
// headers, else with fallback when it carries all of fallback's (the Svix
// libraries' rule); a request complete in neither gets the answer of the set
// whose signature header it carries, primary first, so the reason names what
// is missing.
type headerSet struct {
	primaryNames, fallbackNames [3]string
	primary, fallback           Verifier
}

var _ Verifier = (*headerSet)(nil)

func (s *headerSet) Verify(h http.Header, body []byte, now time.Time) error {
	switch {
	case complete(h, s.primaryNames):
		return s.primary.Verify(h, body, now)
	case complete(h, s.fallbackNames):
		return s.fallback.Verify(h, body, now)
	case h.Get(s.fallbackNames[2]) != "" && h.Get(s.primaryNames[2]) == "":
		return s.fallback.Verify(h, body, now)
	}
	return s.primary.Verify(h, body, now)
}

func complete(h http.Header, names [3]string) bool {
	for _, n := range names {
		if trimOWS(h.Get(n)) == "" {
			return false
		}
	}
	return true
}
