package sink_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/ankusa/ankusa/internal/hook"
	"github.com/ankusa/ankusa/internal/sink"
)

// TestEncodeJSON_DropHeaders: the queue message carries every request
// header except the configured drop list, by default the provider's
// credentials to Ankusa (authorization, cookie, proxy-authorization); an
// empty list carries all of them, and names match in any case.
func TestEncodeJSON_DropHeaders(t *testing.T) {
	m := &sink.Message{ID: uuid.New(), Tenant: "default", Source: "s", Headers: []hook.Header{
		{Name: "authorization", Value: "Bearer x"},
		{Name: "content-type", Value: "application/json"},
		{Name: "cookie", Value: "c=1"},
		{Name: "proxy-authorization", Value: "Basic y"},
		{Name: "x-hub-signature-256", Value: "sha256=ab"},
		{Name: "x-internal", Value: "1"},
	}}
	for _, c := range []struct {
		name string
		drop []string
		want []string
	}{
		{"default (nil)", nil, []string{"content-type", "x-hub-signature-256", "x-internal"}},
		{"the documented default list", sink.DefaultDropHeaders(), []string{"content-type", "x-hub-signature-256", "x-internal"}},
		{"empty: carry everything", []string{}, []string{"authorization", "content-type", "cookie", "proxy-authorization", "x-hub-signature-256", "x-internal"}},
		{"own list, any case", []string{"X-Internal", "Authorization"}, []string{"content-type", "cookie", "proxy-authorization", "x-hub-signature-256"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got struct {
				Headers []struct{ Name, Value string } `json:"headers"`
			}
			if err := json.Unmarshal(sink.EncodeJSON(m, sink.NewHeaderFilter(c.drop)), &got); err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, h := range got.Headers {
				names = append(names, h.Name)
			}
			if !slices.Equal(names, c.want) {
				t.Fatalf("headers %v, want %v", names, c.want)
			}
		})
	}
}
