package sources_test

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/app"
	"github.com/ankusa/ankusa/internal/app/apptest"
	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/dispatch"
	"github.com/ankusa/ankusa/internal/edge"
	"github.com/ankusa/ankusa/internal/sources"
	"github.com/ankusa/ankusa/internal/sources/sourcestest"
	"github.com/ankusa/ankusa/internal/store"
	"github.com/ankusa/ankusa/internal/testutil"
)

func parse(t *testing.T, js string) config.SourceConfig {
	t.Helper()
	var sc config.SourceConfig
	if err := json.Unmarshal([]byte(js), &sc); err != nil {
		t.Fatal(err)
	}
	return sc
}

// block is js as the operator API hands it to the Manager: decoded into the
// config's source block and encoded again.
func block(t *testing.T, js string) json.RawMessage {
	t.Helper()
	raw, err := json.Marshal(parse(t, js))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// stored reads the stored block of id (secrets included).
func stored(t *testing.T, e *sourcestest.Env, id string) config.SourceConfig {
	t.Helper()
	v, err := e.Store.Get(store.SourceKey(id))
	if err != nil || v == nil {
		t.Fatalf("source %s not stored (%v)", id, err)
	}
	var rec struct {
		Config config.SourceConfig `json:"config"`
	}
	if err := json.Unmarshal(v, &rec); err != nil {
		t.Fatal(err)
	}
	return rec.Config
}

func TestValidateSource(t *testing.T) {
	c := config.Default()
	c.Sources = nil
	c.SourceStore.Type = config.SourceStorePersistent
	c.Quarantine.MaxBytes = 1 << 20 // below http.max_body_bytes: fine until a source quarantines
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	ok := config.SourceConfig{Sinks: []config.SinkConfig{{ID: "log", Type: "log"}}}.WithDefaults()
	if err := c.ValidateSource("acme.orders", ok); err != nil {
		t.Errorf("valid API source: %v", err)
	}
	if err := c.ValidateSource("plain", ok); err != nil {
		t.Errorf("valid config source id: %v", err)
	}

	keys := func(err error) []string {
		var es config.Errors
		if !errors.As(err, &es) {
			t.Fatalf("%v is not config.Errors", err)
		}
		var ks []string
		for _, e := range es {
			ks = append(ks, e.Key+": "+e.Rule)
		}
		return ks
	}
	bad := ok
	bad.Sinks = []config.SinkConfig{{ID: "BAD", Type: "log"}}
	got := keys(c.ValidateSource("acme.orders", bad))
	if len(got) != 1 || !strings.HasPrefix(got[0], "sources.acme.orders.sinks[0].id: ") {
		t.Errorf("errors = %q, want one on sources.acme.orders.sinks[0].id", got)
	}
	got = keys(c.ValidateSource("ac me.a.b", ok))
	if len(got) != 2 || !strings.Contains(got[0], "tenant must match") || !strings.Contains(got[1], "name must match") {
		t.Errorf("errors = %q, want the tenant and the name refused", got)
	}
	got = keys(c.ValidateSource("has.dot.", ok))
	if len(got) != 1 || !strings.Contains(got[0], `name must match [A-Za-z0-9_-]{1,64}, got "dot."`) {
		t.Errorf("errors = %q", got)
	}

	// A rule across blocks: the source is what breaks it, so it is reported,
	// naming the source.
	q := ok
	q.Verify = config.VerifyConfig{Type: "github", Secret: config.StringList{"s"}, ToleranceSeconds: ok.Verify.ToleranceSeconds}
	q.OnVerifyFailure = config.OnVerifyFailureQuarantine
	got = keys(c.ValidateSource("acme.orders", q))
	if len(got) != 1 || !strings.HasPrefix(got[0], "quarantine.max_bytes: ") || !strings.Contains(got[0], "(acme.orders)") {
		t.Errorf("errors = %q, want quarantine.max_bytes naming acme.orders", got)
	}

	// The config's own problems are not the block's.
	broken := *c
	broken.Retry.MaxAttempts = 0
	if err := broken.ValidateSource("acme.orders", ok); err != nil {
		t.Errorf("a config problem reported against the source: %v", err)
	}
}

func TestWithDefaultsAndRedacted(t *testing.T) {
	in := parse(t, `{"verify":{"type":"github","secret":["s3cret"]},"dedupe":{"header":"X-Id"},
		"sinks":[{"type":"http","http":{"url":"https://example.com/in","secret":"0123456789abcdef","headers":{"Authorization":"Bearer tok"}}},
		{"type":"kafka","kafka":{"brokers":["k:9092"],"topic":"t","sasl":{"mechanism":"plain","username":"u","password":"pw"}}}]}`)
	before, _ := json.Marshal(in)
	d := in.WithDefaults()
	after, _ := json.Marshal(in)
	if string(before) != string(after) {
		t.Errorf("WithDefaults modified its receiver:\n%s\n%s", before, after)
	}
	if d.Verify.ToleranceSeconds == nil || *d.Verify.ToleranceSeconds != 300 || d.OnVerifyFailure != "reject" ||
		d.Dedupe.TTLSeconds != 259_200 || d.Sinks[0].ID != "http" || d.Sinks[0].HTTP.TimeoutMs != 5_000 ||
		d.Sinks[1].ID != "kafka" || d.Sinks[1].Kafka.TimeoutMs != 10_000 {
		t.Errorf("defaults not applied: %+v", d)
	}
	if d2 := (config.SourceConfig{}).WithDefaults(); d2.Verify.Type != "none" {
		t.Errorf("verify.type default = %q, want none", d2.Verify.Type)
	}

	raw, _ := json.Marshal(d.Redacted())
	for _, secret := range []string{"s3cret", "0123456789abcdef", "Bearer tok", `"pw"`} {
		if strings.Contains(string(raw), secret) {
			t.Errorf("Redacted shows %s: %s", secret, raw)
		}
	}
	for _, shown := range []string{`"https://example.com/in"`, `"X-Id"`, `"github"`, `"username":"u"`} {
		if !strings.Contains(string(raw), shown) {
			t.Errorf("Redacted hides %s: %s", shown, raw)
		}
	}
}

func TestUpdate_KeepsSinkSecrets(t *testing.T) {
	e := apptest.SourcesEnv(t, sourcestest.Options{})
	m := e.Manager
	_, err := m.Create("acme", "orders", block(t, `{"sinks":[
		{"type":"http","http":{"url":"https://example.com/in","secret":"0123456789abcdef","headers":{"Authorization":"Bearer tok","X-Plain":"p"}}},
		{"type":"kafka","kafka":{"brokers":["k:9092"],"topic":"t","sasl":{"mechanism":"plain","username":"u","password":"pw"}}},
		{"type":"nats","nats":{"url":"nats://n:4222","subject":"s","token":"ntok"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	// The view sent back, headers redacted and secrets left out.
	_, err = m.Update("acme", "orders", block(t, `{"sinks":[
		{"type":"http","http":{"url":"https://example.com/in","timeout_ms":9000,"headers":{"Authorization":"[REDACTED]"}}},
		{"type":"kafka","kafka":{"brokers":["k:9092"],"topic":"t","sasl":{"mechanism":"plain","username":"u"}}},
		{"type":"nats","nats":{"url":"nats://n:4222","subject":"s"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	sc := stored(t, e, "acme.orders")
	h := sc.Sinks[0].HTTP
	if h.TimeoutMs != 9000 || h.Secret != "0123456789abcdef" || h.Headers["Authorization"] != "Bearer tok" || len(h.Headers) != 1 {
		t.Errorf("http sink after update: %+v", h)
	}
	if p := sc.Sinks[1].Kafka.SASL.Password; p != "pw" {
		t.Errorf("kafka password = %q, want kept", p)
	}
	if tok := sc.Sinks[2].NATS.Token; tok != "ntok" {
		t.Errorf("nats token = %q, want kept", tok)
	}

	// A redacted value that has nothing to keep is refused.
	_, err = m.Update("acme", "orders", block(t, `{"sinks":[
		{"type":"http","http":{"url":"https://example.com/in","headers":{"X-New":"[REDACTED]"}}}]}`))
	if !errors.Is(err, sources.ErrInvalid) || !strings.Contains(err.Error(), "sources.acme.orders.sinks[0].http.headers.X-New") {
		t.Errorf("err = %v, want invalid naming the header", err)
	}
	// A sink whose type changed keeps nothing.
	_, err = m.Update("acme", "orders", block(t, `{"sinks":[{"id":"http","type":"log"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Update("acme", "orders", block(t, `{"sinks":[{"id":"http","type":"http","http":{"url":"https://example.com/in"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if s := stored(t, e, "acme.orders").Sinks[0].HTTP.Secret; s != "" {
		t.Errorf("secret came back through a type change: %q", s)
	}
	// verify type none drops the secret rather than keeping it.
	if _, err := m.Update("acme", "orders", block(t, `{"verify":{"type":"github","secret":["s"]},"sinks":[{"type":"log"}]}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Update("acme", "orders", block(t, `{"verify":{"type":"none"},"sinks":[{"type":"log"}]}`)); err != nil {
		t.Fatalf("to verify none: %v", err)
	}
	if s := stored(t, e, "acme.orders").Verify.Secret; len(s) != 0 {
		t.Errorf("verify none kept secret %q", s)
	}
}

// A secret kept across an update never follows a changed destination: a
// value sent back as "[REDACTED]" is refused naming the key, a secret left
// out is dropped, and nothing stored reaches the new host.
func TestUpdate_SecretNeverFollowsAChangedDestination(t *testing.T) {
	e := apptest.SourcesEnv(t, sourcestest.Options{})
	m := e.Manager
	_, err := m.Create("acme", "orders", block(t, `{"sinks":[
		{"type":"http","http":{"url":"https://example.com/in","secret":"0123456789abcdef","headers":{"Authorization":"Bearer tok"}}},
		{"type":"kafka","kafka":{"brokers":["k:9092"],"topic":"t","sasl":{"mechanism":"plain","username":"u","password":"pw"}}},
		{"type":"nats","nats":{"url":"nats://n:4222","subject":"s","token":"ntok"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Update("acme", "orders", block(t, `{"sinks":[
		{"type":"http","http":{"url":"https://attacker.example/in","headers":{"Authorization":"[REDACTED]"}}},
		{"type":"kafka","kafka":{"brokers":["k:9092"],"topic":"t","sasl":{"mechanism":"plain","username":"u"}}},
		{"type":"nats","nats":{"url":"nats://n:4222","subject":"s"}}]}`))
	if !errors.Is(err, sources.ErrInvalid) || !strings.Contains(err.Error(), "sources.acme.orders.sinks[0].http.headers.Authorization") ||
		!strings.Contains(err.Error(), "destination changed") {
		t.Fatalf("URL changed with the Authorization sent back redacted: %v, want invalid naming the header and the changed destination", err)
	}
	if h := stored(t, e, "acme.orders").Sinks[0].HTTP; h.URL != "https://example.com/in" {
		t.Fatalf("a refused update changed the sink: %+v", h)
	}
	_, err = m.Update("acme", "orders", block(t, `{"sinks":[
		{"type":"http","http":{"url":"https://attacker.example/in"}},
		{"type":"kafka","kafka":{"brokers":["other:9092"],"topic":"t","sasl":{"mechanism":"plain","username":"u","password":"pw2"}}},
		{"type":"nats","nats":{"url":"nats://elsewhere:4222","subject":"s"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	sc := stored(t, e, "acme.orders")
	if h := sc.Sinks[0].HTTP; h.Secret != "" || len(h.Headers) != 0 {
		t.Errorf("http sink moved to a new URL kept its secrets: %+v", h)
	}
	if p := sc.Sinks[1].Kafka.SASL.Password; p != "pw2" {
		t.Errorf("kafka password = %q, want the one sent", p)
	}
	if tok := sc.Sinks[2].NATS.Token; tok != "" {
		t.Errorf("nats sink moved to a new server kept its token %q", tok)
	}
}

func TestUpdate_ReplacedSinksAreClosed(t *testing.T) {
	e := apptest.SourcesEnv(t, sourcestest.Options{})
	if _, err := e.Manager.Create("acme", "orders", block(t, `{"sinks":[{"type":"log"},{"id":"copy","type":"log"}]}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Manager.Update("acme", "orders", block(t, `{"sinks":[{"type":"log"}]}`)); err != nil {
		t.Fatal(err)
	}
	if b, c := e.Sinks.Built(), e.Sinks.Closed(); b != 3 || c != 2 {
		t.Errorf("built %d, closed %d; want 3 built, 2 closed (log replaced, copy removed)", b, c)
	}
	src, ok := e.Registry.Get("acme.orders")
	if !ok || len(src.Sinks) != 1 || src.Sinks[0].ID != "log" {
		t.Errorf("registered source = %+v", src)
	}
}

func TestCreate_ConcurrentGetDistinctSinkNumbers(t *testing.T) {
	e := apptest.SourcesEnv(t, sourcestest.Options{})
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			_, err := e.Manager.Create("acme", fmt.Sprintf("s%02d", i), block(t, `{"sinks":[{"type":"log"},{"id":"b","type":"log"}]}`))
			errs <- err
			_, _ = e.Manager.List("acme")
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	seen := map[uint16]string{}
	err := e.Store.Scan([]byte{store.PrefixSinkNum}, []byte{store.PrefixSinkNum + 1}, func(k, v []byte) bool {
		num := binary.BigEndian.Uint16(v)
		if prev, dup := seen[num]; dup {
			t.Errorf("sink number %d given to %q and %q", num, prev, k)
		}
		seen[num] = string(k)
		return true
	})
	if err != nil || len(seen) != 2*n {
		t.Errorf("%d sink numbers (%v), want %d", len(seen), err, 2*n)
	}
	vs, _ := e.Manager.List("acme")
	if len(vs) != n || vs[0].Name != "s00" || vs[n-1].Name != "s15" {
		t.Errorf("list: %d sources, want %d by name", len(vs), n)
	}
}

func TestLoad_RefusesBadRows(t *testing.T) {
	for name, row := range map[string]string{
		"not json":       `{`,
		"unknown format": `{"format":2,"tenant":"acme","name":"x"}`,
		"wrong key":      `{"format":1,"tenant":"acme","name":"y"}`,
		"invalid block":  `{"format":1,"tenant":"acme","name":"x","config":{"tenant":"acme","verify":{"type":"none"},"sinks":[]}}`,
	} {
		t.Run(name, func(t *testing.T) {
			st := testutil.OpenStore(t, testutil.TempStoreDir(t), nil)
			b := st.NewBatch()
			_ = b.Set(store.SourceKey("acme.x"), []byte(row), nil)
			if err := st.ApplySync(b); err != nil {
				t.Fatal(err)
			}
			_ = b.Close()
			cfg := config.Default()
			m := sources.New(sources.Options{
				Store: st, Registry: edge.NewRegistry(nil), Dispatch: dispatch.New(st, dispatch.Options{}),
				Schema: app.SourceSchema(cfg, nil), Logger: testutil.Logger(t),
			})
			err := m.Load()
			if err == nil || !strings.Contains(err.Error(), "acme.x") {
				t.Errorf("Load = %v, want an error naming acme.x", err)
			}
		})
	}
}

// Deleting a source with deliveries=dead_letter moves its due rows to the
// dead-letter queue through the dispatcher, the one writer of delivery
// rows, so ankusa_queue_dead (Dispatcher.Gauges().Dead) counts them at
// once. Before the fix the manager wrote the rows itself from the API
// goroutine and the gauge stayed short until a restart recounted.
func TestDelete_DeadLetterCountsInTheDeadGaugeWithoutARestart(t *testing.T) {
	e := apptest.SourcesEnv(t, sourcestest.Options{Dispatch: true})
	if _, err := e.Manager.Create("acme", "orders", block(t, `{"sinks":[{"type":"log"},{"id":"copy","type":"log"}]}`)); err != nil {
		t.Fatal(err)
	}
	// Every attempt fails once and its row waits an hour for the retry:
	// due, not inflight, so the delete may dead-letter it.
	e.Sinks.FailAttempts(errors.New("target down"))
	const hooks, rows = 2, 4
	for i := range hooks {
		if h := e.Post(t, "/webhooks/acme.orders", []byte(fmt.Sprintf(`{"n":%d}`, i)), nil); h.Status != 201 {
			t.Fatalf("hook %d: status %d (%s)", i, h.Status, h.Raw)
		}
	}
	for range rows {
		e.Sinks.Started(t)
	}
	testutil.Eventually(t, 10*time.Second, "every row back to due after its failed attempt", func() bool {
		g := e.Dispatch.Gauges()
		return g.Inflight == 0 && g.Pending == rows
	})
	if g := e.Dispatch.Gauges(); g.Dead != 0 {
		t.Fatalf("dead gauge before the delete = %d", g.Dead)
	}
	d, err := e.Manager.Delete("acme", "orders", true)
	if err != nil {
		t.Fatal(err)
	}
	if d.DeadLettered != rows {
		t.Fatalf("dead_lettered = %d, want %d", d.DeadLettered, rows)
	}
	total, _, err := e.Dispatch.DLQ(dispatch.DLQFilter{SourceID: "acme.orders", Limit: 100})
	if err != nil || total != rows {
		t.Fatalf("DLQ total = %d (%v), want %d", total, err, rows)
	}
	if g := e.Dispatch.Gauges(); g.Dead != rows || g.Pending != 0 {
		t.Fatalf("gauges after the delete: dead %d pending %d, want %d and 0 (without a restart)", g.Dead, g.Pending, rows)
	}
	e.Restart(t)
	if g := e.Dispatch.Gauges(); g.Dead != rows {
		t.Fatalf("dead gauge after a restart = %d, want %d", g.Dead, rows)
	}
}
